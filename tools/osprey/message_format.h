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
// `message` as JSON (field names as in the .proto) or text format, ending
// in a newline.
std::string PrintMessage(MessageFormat format, const google::protobuf::Message& message);
// As PrintMessage, on one line, without the newline (inside a message).
std::string PrintMessageOnOneLine(MessageFormat format, const google::protobuf::Message& message);

}  // namespace osprey::cli
