// Clang thread-safety annotations. Under g++ they expand to nothing; the
// sanitizer build uses clang with -Werror=thread-safety so that every
// OSPREY_GUARDED_BY field is checked there. Prefixed: this header is
// installed (messenger.h, proxy.h and mutex.h use them), and a user's own
// GUARDED_BY, Abseil's or Kudu's gutil's, must not clash with ours.
#pragma once

#if defined(__clang__)
#define OSPREY_TSA(x) __attribute__((x))
#else
#define OSPREY_TSA(x)
#endif

#define OSPREY_CAPABILITY(x) OSPREY_TSA(capability(x))
#define OSPREY_SCOPED_CAPABILITY OSPREY_TSA(scoped_lockable)
#define OSPREY_GUARDED_BY(x) OSPREY_TSA(guarded_by(x))
#define OSPREY_PT_GUARDED_BY(x) OSPREY_TSA(pt_guarded_by(x))
#define OSPREY_REQUIRES(...) OSPREY_TSA(requires_capability(__VA_ARGS__))
#define OSPREY_EXCLUDES(...) OSPREY_TSA(locks_excluded(__VA_ARGS__))
#define OSPREY_ACQUIRE(...) OSPREY_TSA(acquire_capability(__VA_ARGS__))
#define OSPREY_RELEASE(...) OSPREY_TSA(release_capability(__VA_ARGS__))
#define OSPREY_TRY_ACQUIRE(...) OSPREY_TSA(try_acquire_capability(__VA_ARGS__))
#define OSPREY_NO_THREAD_SAFETY_ANALYSIS OSPREY_TSA(no_thread_safety_analysis)
#define OSPREY_ASSERT_CAPABILITY(x) OSPREY_TSA(assert_capability(x))
