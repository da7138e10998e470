// Requests in and responses out of the osprey command, as protobuf's JSON
// mapping or its text format. Any thread.
#pragma once

#include <google/protobuf/message.h>

#include <string>

#include "osprey/base/status.h"

namespace osprey::cli {

enum class MessageFormat { kJson, kText };

// Fills `message` (empty, of the method's request type) from `input`: an
// empty input is the empty message. InvalidArgument naming the field and
// why if `input` does not match the type or leaves a required field out.
Status ParseMessage(MessageFormat format, const std::string& input,
                    google::protobuf::Message* message);
enum class Layout { kIndented, kOneLine };
// `message` as JSON (field names as in the .proto) or text format:
// indented and ending in a newline, or on one line without it (to quote
// inside an error).
std::string PrintMessage(MessageFormat format, const google::protobuf::Message& message,
                         Layout layout = Layout::kIndented);

}  // namespace osprey::cli
