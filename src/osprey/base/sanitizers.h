// OSPREY_SANITIZED: defined in a build under AddressSanitizer or
// ThreadSanitizer (GCC's and clang's spellings), for tests whose figures a
// sanitizer changes (resident memory kept in its quarantine, calls slowed
// tenfold). Not installed.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define OSPREY_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define OSPREY_SANITIZED 1
#endif
#endif
