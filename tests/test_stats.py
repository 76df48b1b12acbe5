import pytest

from star.stats import paired_bootstrap


def test_a_consistent_gain_excludes_zero_and_noise_does_not():
    before = {i: float(i % 2) for i in range(200)}
    better = {i: 1.0 if i % 4 else before[i] for i in range(200)}  # 50 more items solved, none lost
    gain = paired_bootstrap(better, before)
    assert gain["n"] == 200
    assert gain["gain"] == pytest.approx(0.25)
    assert 0 < gain["ci_low"] < 0.25 < gain["ci_high"]
    shuffled = {i: before[(i + 1) % 200] for i in range(200)}  # same rate, items swapped
    noise = paired_bootstrap(shuffled, before)
    assert noise["ci_low"] < 0 < noise["ci_high"]


def test_only_shared_items_count_and_the_seed_fixes_the_interval():
    a, b = {1: 1.0, 2: 0.0, 3: 1.0}, {2: 1.0, 3: 1.0, 4: 0.0}
    assert paired_bootstrap(a, b)["n"] == 2
    assert paired_bootstrap(a, b, seed=1) == paired_bootstrap(a, b, seed=1)
    with pytest.raises(ValueError):
        paired_bootstrap({1: 1.0}, {2: 1.0})
