/* THE kernel/user ABI of headroom: every struct and enum that crosses a BPF map or ring
 * buffer. Fixed-width types, no pointers, explicit padding; sizes asserted on both sides. */
#ifndef HEADROOM_BPF_EVENTS_H
#define HEADROOM_BPF_EVENTS_H

#ifdef __cplusplus
#include <linux/types.h>
#define HEADROOM_STATIC_ASSERT(c, m) static_assert(c, m)
#elif defined(__bpf__)
#define HEADROOM_STATIC_ASSERT(c, m) _Static_assert(c, m)
#else
#include <linux/types.h>
#define HEADROOM_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

/* Per thread group: exits seen by the exit-count program (the BPF pipeline's first program). */
struct exit_count {
	__u64 thread_exits;   /* every task of the group that exited */
	__u64 group_exits;    /* 1 once the last task has exited */
	__s32 exit_code;      /* task->exit_code of the last task: (status << 8) | signal */
	__u32 _pad;
};
HEADROOM_STATIC_ASSERT(sizeof(struct exit_count) == 24, "exit_count ABI");

#endif /* HEADROOM_BPF_EVENTS_H */
