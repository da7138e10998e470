# osprey_generate_rpc(TARGET <name> PROTOS <file.proto>... [IMPORT_DIRS <dir>...])
#
# Generates protobuf messages and Osprey service interfaces and proxies for the
# given .proto files and builds them into a static library <name> that links
# Osprey::osprey. Generated headers are found as "<file>.pb.h" and
# "<file>.osprey.h" relative to the build directory of the calling CMakeLists.
function(osprey_generate_rpc)
  cmake_parse_arguments(ARG "" "TARGET" "PROTOS;IMPORT_DIRS" ${ARGN})
  if(NOT ARG_TARGET OR NOT ARG_PROTOS)
    message(FATAL_ERROR "osprey_generate_rpc: TARGET and PROTOS are required")
  endif()
  if(TARGET protoc-gen-osprey)
    set(plugin $<TARGET_FILE:protoc-gen-osprey>)
    set(plugin_dep protoc-gen-osprey)
  elseif(TARGET Osprey::protoc-gen-osprey)
    set(plugin $<TARGET_FILE:Osprey::protoc-gen-osprey>)
    set(plugin_dep Osprey::protoc-gen-osprey)
  else()
    message(FATAL_ERROR "osprey_generate_rpc: protoc-gen-osprey not found")
  endif()
  if(TARGET Osprey::osprey)
    set(runtime Osprey::osprey)
  else()
    set(runtime osprey)
  endif()

  set(out_dir ${CMAKE_CURRENT_BINARY_DIR})
  set(srcs)
  foreach(proto IN LISTS ARG_PROTOS)
    get_filename_component(abs ${proto} ABSOLUTE)
    get_filename_component(dir ${abs} DIRECTORY)
    get_filename_component(stem ${abs} NAME_WE)
    set(gen
      ${out_dir}/${stem}.pb.cc ${out_dir}/${stem}.pb.h
      ${out_dir}/${stem}.osprey.cc ${out_dir}/${stem}.osprey.h)
    set(include_flags -I${dir})
    # Where "kudu/rpc/rpc_header.proto" (Kudu's method options) is found.
    if(OSPREY_PROTO_DIR)
      list(APPEND include_flags -I${OSPREY_PROTO_DIR})
    endif()
    foreach(d IN LISTS ARG_IMPORT_DIRS)
      list(APPEND include_flags -I${d})
    endforeach()
    add_custom_command(
      OUTPUT ${gen}
      COMMAND protobuf::protoc ${include_flags}
              --cpp_out=${out_dir}
              --plugin=protoc-gen-osprey=${plugin}
              --osprey_out=${out_dir}
              ${abs}
      DEPENDS ${abs} ${plugin_dep} protobuf::protoc
      COMMENT "Generating Osprey RPC code for ${proto}"
      VERBATIM)
    list(APPEND srcs ${out_dir}/${stem}.pb.cc ${out_dir}/${stem}.osprey.cc)
  endforeach()
  add_library(${ARG_TARGET} STATIC ${srcs})
  target_include_directories(${ARG_TARGET} PUBLIC ${out_dir})
  target_link_libraries(${ARG_TARGET} PUBLIC ${runtime} protobuf::libprotobuf)
  # Generated code is not ours to keep warning-free.
  target_compile_options(${ARG_TARGET} PRIVATE -Wno-unused-parameter)
endfunction()
