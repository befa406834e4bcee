"""Prime bucket sizes of the Engram hash (deterministic Miller-Rabin)."""

from __future__ import annotations

import functools

# NOTE: these witnesses make Miller-Rabin exact for every n < 3.3e24, far above any
# bucket size a table could have.
_WITNESSES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)


def is_prime(n: int) -> bool:
    if n < 2:
        return False
    for p in _WITNESSES:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for a in _WITNESSES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


@functools.lru_cache(maxsize=64)
def prime_layout(
    n_layers: int, max_ngram_size: int, n_heads: int, vocab_size: int
) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Primes indexed [layer][n-gram order - 2][head].

    Each (layer, order) restarts the ascending search just above ``vocab_size - 1`` and
    takes the next ``n_heads`` primes that no earlier column has taken, so every column
    of every layer gets a distinct prime.
    """
    seen: set[int] = set()
    layers = []
    for _ in range(n_layers):
        orders = []
        for _ in range(max_ngram_size - 1):
            heads, candidate = [], vocab_size - 1
            for _ in range(n_heads):
                candidate += 1
                while candidate in seen or not is_prime(candidate):
                    candidate += 1
                seen.add(candidate)
                heads.append(candidate)
            orders.append(tuple(heads))
        layers.append(tuple(orders))
    return tuple(layers)
