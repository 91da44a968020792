#pragma once
// Huge pages for malloc. Reading a large snapshot, replaying it and importing it fill hundreds of
// megabytes of fresh buffers; on a virtual machine a 4 KiB page fault costs microseconds, so page
// faults were a third of import and info. With transparent huge pages in "madvise" mode (the
// common default), glibc only asks for 2 MiB pages when started with the tunable
// glibc.malloc.hugetlb=1, which can only be set before the process starts: a binary calls
// use_huge_page_malloc() first thing in main(), and it re-executes itself once with the tunable
// set. Nothing changes where THP is "always" or "never", where the tunable is already set, or
// when FRAGSCOPE_HUGE_PAGES=0.
namespace fragscope {

// Returns when no re-execution is needed (or exec failed: the process then runs on unchanged).
// Call before any thread is started. Child processes do not inherit the tunable.
void use_huge_page_malloc(char** argv);

}  // namespace fragscope
