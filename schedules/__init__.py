"""Shipped .l2s schedules, installed inside the l2sched wheel."""
