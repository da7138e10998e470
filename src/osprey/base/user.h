// The name of the OS user this process runs as: what a client sends as its
// SASL PLAIN user and connection-context real_user.
#pragma once

#include <string>

namespace osprey {

const std::string& CurrentUserName();

}  // namespace osprey
