#!/usr/bin/env python3
"""Reference values for test/statistics.test.ts: Student-t quantiles computed independently of
core-adapters/report/statistics.ts (which inverts the incomplete beta function): here the density
is integrated with Simpson's rule and the quantile found by bisection. Standard library only.
Run: python3 scripts/t_quantile_reference.py"""
import math


def pdf(t, df):
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    return c * (1 + t * t / df) ** (-(df + 1) / 2)


def cdf(t, df, intervals=20000):
    # 0.5 + the integral of the density from 0 to t (Simpson, an even number of intervals).
    h = t / intervals
    s = pdf(0, df) + pdf(t, df)
    for i in range(1, intervals):
        s += (4 if i % 2 else 2) * pdf(i * h, df)
    return 0.5 + s * h / 3


def quantile(p, df):
    lo, hi = 0.0, 1.0
    while cdf(hi, df) < p:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


for p in (0.975, 0.995):
    print(p, {df: round(quantile(p, df), 6) for df in (3, 4, 5, 7, 9, 19, 29)})
