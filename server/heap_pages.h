// The daemon's heap on transparent huge pages, where the kernel offers them
// on request (/sys/kernel/mm/transparent_hugepage/enabled: madvise).
//
// A restart with 1 M pending timers builds about 110 MB of records, key
// index and wheel in under a second; on 4 KiB pages a fifth of that second
// was page faults. glibc asks for huge pages for its heaps when its
// glibc.malloc.hugetlb tunable is 1, and reads tunables from the
// environment only as a process starts: so the daemon, started without it,
// executes itself again once with it set. Measured (restart_rss.py's
// store, recovery of 1 M timers): 0.44-0.53 s against 0.68-0.70 s, RSS
// after it 1.006x.
#ifndef DELAYD_SERVER_HEAP_PAGES_H_
#define DELAYD_SERVER_HEAP_PAGES_H_

namespace delayd {

// Returns if GLIBC_TUNABLES already names glibc.malloc.hugetlb (the
// operator's choice, or this process's own second start), if the process
// runs in secure mode (glibc drops tunables then), or if executing
// /proc/self/exe fails; else does not return. Call first in main(), before
// any thread starts.
void ExecWithHugePageHeap(char** argv);

}  // namespace delayd

#endif  // DELAYD_SERVER_HEAP_PAGES_H_
