/* The ABI of the test program exitcount.bpf.c: its map's value, shared with tests/testing/
 * exit_counter.cpp. Fixed-width types, explicit padding, the size asserted on both sides. */
#ifndef HEADROOM_TESTS_EXITCOUNT_H
#define HEADROOM_TESTS_EXITCOUNT_H

#ifdef __cplusplus
#include <linux/types.h>
#define HEADROOM_TEST_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#ifndef __bpf__
#include <linux/types.h>
#endif
#define HEADROOM_TEST_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

/* Per thread group: exits seen by the exit-count program. */
struct exit_count {
	__u64 thread_exits;   /* every task of the group that exited */
	__u64 group_exits;    /* 1 once the last task has exited */
	__s32 exit_code;      /* task->exit_code of the last task: (status << 8) | signal */
	__u32 _pad;
};
HEADROOM_TEST_STATIC_ASSERT(sizeof(struct exit_count) == 24, "exit_count ABI");

#endif /* HEADROOM_TESTS_EXITCOUNT_H */
