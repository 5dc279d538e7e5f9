/* Helpers shared by headroom's BPF programs. */
#ifndef HEADROOM_COMMON_BPF_H
#define HEADROOM_COMMON_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "events.h"

/* Looks a key up, inserting a zeroed value first when it is missing. NULL only when the map
 * refuses the insert (full, for a non-LRU map). */
static __always_inline void *lookup_or_init(void *map, const void *key, const void *zero)
{
	void *v = bpf_map_lookup_elem(map, key);
	if (v)
		return v;
	bpf_map_update_elem(map, key, zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, key);
}

#endif /* HEADROOM_COMMON_BPF_H */
