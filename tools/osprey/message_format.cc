#include "message_format.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/type_resolver_util.h>

#include <memory>

namespace osprey::cli {

namespace {

class TextErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (!errors.empty()) errors += "; ";
    errors += "line " + std::to_string(line + 1) + " column " + std::to_string(column + 1) + ": " +
              message;
  }
  void AddWarning(int, int, const std::string&) override {}
  std::string errors;
};

// protobuf's JSON printer serializes the message first, which a message
// missing required fields (an error detail parsed partially, a hostile
// server's) must not do: such a message goes through its bytes instead.
std::string ToJson(const google::protobuf::Message& message,
                   const google::protobuf::util::JsonPrintOptions& options) {
  std::string out;
  if (message.IsInitialized()) {
    (void)google::protobuf::util::MessageToJsonString(message, &out, options);
    return out;
  }
  const google::protobuf::Descriptor* type = message.GetDescriptor();
  std::unique_ptr<google::protobuf::util::TypeResolver> resolver(
      google::protobuf::util::NewTypeResolverForDescriptorPool("type.googleapis.com",
                                                               type->file()->pool()));
  std::string binary;
  message.SerializePartialToString(&binary);
  (void)google::protobuf::util::BinaryToJsonString(
      resolver.get(), "type.googleapis.com/" + type->full_name(), binary, &out, options);
  return out;
}

bool Blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

}  // namespace

Status ParseMessage(MessageFormat format, const std::string& input,
                    google::protobuf::Message* message) {
  const std::string& type = message->GetDescriptor()->full_name();
  if (!Blank(input)) {
    if (format == MessageFormat::kJson) {
      google::protobuf::util::JsonParseOptions options;
      auto s = google::protobuf::util::JsonStringToMessage(input, message, options);
      if (!s.ok()) {
        std::string why(s.message());
        if (why.rfind(": ", 0) == 0) why.erase(0, 2);  // a path left empty (the top level)
        while (!why.empty() && (why.back() == '\n' || why.back() == '^')) why.pop_back();
        return Status::InvalidArgument("the request does not match " + type + " (JSON): " + why);
      }
    } else {
      google::protobuf::TextFormat::Parser parser;
      TextErrors errors;
      parser.RecordErrorsTo(&errors);
      if (!parser.ParseFromString(input, message)) {
        return Status::InvalidArgument("the request does not match " + type +
                                       " (text format): " + errors.errors);
      }
    }
  }
  if (!message->IsInitialized()) {
    return Status::InvalidArgument("the request leaves out required fields of " + type + ": " +
                                   message->InitializationErrorString());
  }
  return Status::OK();
}

std::string PrintMessage(MessageFormat format, const google::protobuf::Message& message,
                         Layout layout) {
  const bool one_line = layout == Layout::kOneLine;
  std::string out;
  if (format == MessageFormat::kJson) {
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = !one_line;
    options.preserve_proto_field_names = true;
    out = ToJson(message, options);
    if (!one_line && (out.empty() || out.back() != '\n')) out += '\n';
  } else {
    google::protobuf::TextFormat::Printer printer;
    printer.SetSingleLineMode(one_line);
    printer.PrintToString(message, &out);
    while (one_line && !out.empty() && out.back() == ' ') out.pop_back();
  }
  return out;
}

}  // namespace osprey::cli
