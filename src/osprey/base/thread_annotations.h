// Clang thread-safety annotations. Under g++ they expand to nothing; the
// sanitizer build uses clang with -Werror=thread-safety so that every
// GUARDED_BY field is checked there.
#pragma once

#if defined(__clang__)
#define OSPREY_TSA(x) __attribute__((x))
#else
#define OSPREY_TSA(x)
#endif

#define CAPABILITY(x) OSPREY_TSA(capability(x))
#define SCOPED_CAPABILITY OSPREY_TSA(scoped_lockable)
#define GUARDED_BY(x) OSPREY_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) OSPREY_TSA(pt_guarded_by(x))
#define REQUIRES(...) OSPREY_TSA(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) OSPREY_TSA(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) OSPREY_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) OSPREY_TSA(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) OSPREY_TSA(try_acquire_capability(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS OSPREY_TSA(no_thread_safety_analysis)
#define ASSERT_CAPABILITY(x) OSPREY_TSA(assert_capability(x))
