"""The .l2s grammar (l2s.lark), shipped inside the l2sched wheel."""
