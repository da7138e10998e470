#include "osprey/base/thread_name.h"

#include <pthread.h>

namespace osprey {

void SetCurrentThreadName(std::string_view name) {
  // pthread_setname_np refuses (ERANGE) a name of more than 15 bytes.
  std::string cut(name.substr(0, 15));
  (void)pthread_setname_np(pthread_self(), cut.c_str());
}

std::string CurrentThreadName() {
  char name[16] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof(name)) != 0) return "";
  return name;
}

}  // namespace osprey
