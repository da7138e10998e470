// Fuzzes what the osprey command does with a server's reflection answer:
// builds the FileDescriptorProtos into a pool (AddReflectionAnswer), then
// decodes a response of each message type it defines and prints it as
// JSON and text, as `osprey call` does with a hostile server's bytes.
//
// Input: a 4-byte little-endian length L, L bytes of a serialized
// FileContainingSymbolResponsePB, then the response bytes.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/dynamic_message.h>

#include <cstdint>
#include <cstring>
#include <memory>

#include "descriptor_source.h"
#include "message_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t len;
  std::memcpy(&len, data, 4);
  data += 4;
  size -= 4;
  if (len > size) return 0;
  osprey::reflection::FileContainingSymbolResponsePB answer;
  if (!answer.ParseFromArray(data, static_cast<int>(len))) return 0;
  const std::string response(reinterpret_cast<const char*>(data + len), size - len);
  google::protobuf::DescriptorPool pool;
  (void)osprey::cli::AddReflectionAnswer(answer, &pool);
  google::protobuf::DynamicMessageFactory factory(&pool);
  for (const std::string& bytes : answer.file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto proto;
    if (!proto.ParseFromString(bytes)) continue;
    const google::protobuf::FileDescriptor* file = pool.FindFileByName(proto.name());
    if (file == nullptr) continue;
    for (int i = 0; i < file->message_type_count(); ++i) {
      std::unique_ptr<google::protobuf::Message> m(
          factory.GetPrototype(file->message_type(i))->New());
      if (!m->ParsePartialFromString(response)) continue;
      (void)osprey::cli::PrintMessage(osprey::cli::MessageFormat::kJson, *m);
      (void)osprey::cli::PrintMessage(osprey::cli::MessageFormat::kText, *m);
    }
  }
  return 0;
}
