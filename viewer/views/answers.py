"""Whether a worker's answer is to the request a view still wants.

The worker client stamps each request with a new id (a copy of the one submitted) and drops an
answer superseded by a newer request of its kind; a view that asks again for something else
of the same kind, or whose answer arrives after its wish changed, still checks the answer's
request against the one it wants, field by field: arrays by identity (the very mask it sent),
everything else by value, the id aside.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np


def same_request(a, b) -> bool:
    """`a` and `b` ask for the same thing: the same type and fields (arrays the same objects)."""
    if a is None or b is None or type(a) is not type(b):
        return False
    for f in fields(a):
        if f.name == "rid":
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if x is not y:
                return False
        elif x != y:
            return False
    return True
