// Clang's thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html),
// empty under other compilers. With -Wthread-safety (the TSan build of scripts/test.sh turns it
// on with -Werror) the compiler checks that a member marked STOKER_GUARDED_BY(mu_) is touched
// only with mu_ held and that a function marked STOKER_REQUIRES(mu_) is called only with it.
// Use them with stoker::base::Mutex (mutex.hpp): std::mutex itself carries no annotations.
#pragma once

#if defined(__clang__)
#define STOKER_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define STOKER_THREAD_ANNOTATION(x)
#endif

#define STOKER_CAPABILITY(x) STOKER_THREAD_ANNOTATION(capability(x))
#define STOKER_SCOPED_CAPABILITY STOKER_THREAD_ANNOTATION(scoped_lockable)
#define STOKER_GUARDED_BY(x) STOKER_THREAD_ANNOTATION(guarded_by(x))
#define STOKER_PT_GUARDED_BY(x) STOKER_THREAD_ANNOTATION(pt_guarded_by(x))
#define STOKER_ACQUIRED_BEFORE(...) STOKER_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define STOKER_ACQUIRED_AFTER(...) STOKER_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define STOKER_REQUIRES(...) STOKER_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define STOKER_ACQUIRE(...) STOKER_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define STOKER_RELEASE(...) STOKER_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define STOKER_TRY_ACQUIRE(...) STOKER_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define STOKER_EXCLUDES(...) STOKER_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define STOKER_ASSERT_CAPABILITY(x) STOKER_THREAD_ANNOTATION(assert_capability(x))
#define STOKER_RETURN_CAPABILITY(x) STOKER_THREAD_ANNOTATION(lock_returned(x))
#define STOKER_NO_THREAD_SAFETY_ANALYSIS STOKER_THREAD_ANNOTATION(no_thread_safety_analysis)
