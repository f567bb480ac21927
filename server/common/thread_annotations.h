// Clang's thread-safety attributes (-Wthread-safety), as macros that expand
// to nothing for other compilers. They state which mutex (or which strand:
// see StrandRole in server/core/strand.h) guards a field and which a
// function needs held, and a clang build checks every access against them
// (.ci/run builds with -Wthread-safety -Werror).
// https://clang.llvm.org/docs/ThreadSafetyAnalysis.html
// Each macro is defined only if no header before defined it (Abseil's
// legacy header defines some of them, to the same attributes).
#ifndef DELAYD_SERVER_COMMON_THREAD_ANNOTATIONS_H_
#define DELAYD_SERVER_COMMON_THREAD_ANNOTATIONS_H_

#if defined(__clang__)
#define DELAYD_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define DELAYD_THREAD_ANNOTATION(x)
#endif

#ifndef CAPABILITY
#define CAPABILITY(x) DELAYD_THREAD_ANNOTATION(capability(x))
#endif
#ifndef SCOPED_CAPABILITY
#define SCOPED_CAPABILITY DELAYD_THREAD_ANNOTATION(scoped_lockable)
#endif
#ifndef GUARDED_BY
#define GUARDED_BY(x) DELAYD_THREAD_ANNOTATION(guarded_by(x))
#endif
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) DELAYD_THREAD_ANNOTATION(pt_guarded_by(x))
#endif
#ifndef ACQUIRED_BEFORE
#define ACQUIRED_BEFORE(...) \
  DELAYD_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#endif
#ifndef REQUIRES
#define REQUIRES(...) DELAYD_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#endif
#ifndef REQUIRES_SHARED
#define REQUIRES_SHARED(...) \
  DELAYD_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#endif
#ifndef ACQUIRE
#define ACQUIRE(...) DELAYD_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#endif
#ifndef ACQUIRE_SHARED
#define ACQUIRE_SHARED(...) \
  DELAYD_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#endif
#ifndef RELEASE
#define RELEASE(...) DELAYD_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#endif
#ifndef RELEASE_SHARED
#define RELEASE_SHARED(...) \
  DELAYD_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#endif
#ifndef RELEASE_GENERIC
#define RELEASE_GENERIC(...) \
  DELAYD_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#endif
#ifndef TRY_ACQUIRE
#define TRY_ACQUIRE(...) \
  DELAYD_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#endif
#ifndef TRY_ACQUIRE_SHARED
#define TRY_ACQUIRE_SHARED(...) \
  DELAYD_THREAD_ANNOTATION(try_acquire_shared_capability(__VA_ARGS__))
#endif
#ifndef EXCLUDES
#define EXCLUDES(...) DELAYD_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#endif
#ifndef ASSERT_CAPABILITY
#define ASSERT_CAPABILITY(x) DELAYD_THREAD_ANNOTATION(assert_capability(x))
#endif
#ifndef RETURN_CAPABILITY
#define RETURN_CAPABILITY(x) DELAYD_THREAD_ANNOTATION(lock_returned(x))
#endif
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS \
  DELAYD_THREAD_ANNOTATION(no_thread_safety_analysis)
#endif

#endif  // DELAYD_SERVER_COMMON_THREAD_ANNOTATIONS_H_
