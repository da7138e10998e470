#include "osprey/base/user.h"

#include <pwd.h>
#include <unistd.h>

#include <vector>

namespace osprey {

const std::string& CurrentUserName() {
  static const std::string name = [] {
    passwd pw{};
    passwd* result = nullptr;
    std::vector<char> buf(16384);
    if (getpwuid_r(geteuid(), &pw, buf.data(), buf.size(), &result) == 0 && result != nullptr) {
      return std::string(result->pw_name);
    }
    return "uid-" + std::to_string(geteuid());
  }();
  return name;
}

}  // namespace osprey
