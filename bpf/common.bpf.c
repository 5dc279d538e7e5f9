// SPDX-License-Identifier: GPL-2.0
/* The one definition of the configuration and counters that every program shares. */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "GPL";

const volatile bool cfg_filter_cgroups = false;
const volatile bool cfg_cgroup_v1 = false;

__u64 ring_drops[HR_RING_COUNT] = {};
__u64 map_full_drops = 0;
__u32 filter_gen = 0;
