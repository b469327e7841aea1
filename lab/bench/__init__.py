"""The decode-step research benchmarks: the validation rules and verdicts,
the reports of ``bench run``/``bench tp`` results, the calibration of the
model's step terms, the dispatch controls' residuals and the fill-kernel
bench. They drive ``l2sched.bench``'s measurement and ``l2sched.lint``'s
model; the product never imports them."""
