"""One JSON line each way, as the ``json`` package writes and reads it, without the package:
the event record's lines (output/events.py) and the ranks' status lines (output/summary.py).

A plain launch writes records before the starter's Popen and reads status lines while the
ranks start on the same cores; ``json``'s import (its decoder, scanner, encoder and their
patterns) would cost every launch that (docs/ARCHITECTURE.md, start-up). Both
ends are the C accelerators json.dumps and json.loads themselves use (``_json``).
"""
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable


def _encoder() -> "Callable[[object], str]":
    """``json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)`` from
    ``_json``'s C encoder, the one json.dumps itself uses; json.dumps where that encoder is
    missing or has another signature."""
    try:
        import _json

        encode = _json.make_encoder(None, str, _json.encode_basestring, None, ":", ",",
                                    False, False, True)
        encode({"probe": [1, 0.5, None, "\u00e9"]}, 0)
        return lambda obj: "".join(encode(obj, 0))
    except (ImportError, AttributeError, TypeError):
        import json

        return lambda obj: json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)


dumps = _encoder()


def _loader() -> "Callable[[str], Any]":
    """``json.loads`` from ``_json``'s C scanner, the one json.loads itself uses (malformed text
    raises ValueError, as there); json.loads where that scanner is missing or has another
    signature."""
    try:
        import _json

        class _Context:   # what the C scanner reads: json.JSONDecoder()'s defaults
            strict, object_hook, object_pairs_hook = True, None, None
            parse_float, parse_int = float, int
            parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"),
                              "NaN": float("nan")}.__getitem__

        # any object with those attributes (the stubs name the scanner's own type)
        scan = _json.make_scanner(_Context())   # type: ignore[arg-type]

        def loads(text: str) -> "Any":
            start = len(text) - len(text.lstrip(" \t\n\r"))
            try:
                obj, end = scan(text, start)
            except StopIteration:
                raise ValueError(f"no JSON value at {start}") from None
            if text[end:].strip(" \t\n\r"):
                raise ValueError(f"extra data at {end}")
            return obj

        loads('{"probe": [1, 0.5, null, true, "\\u00e9"]}')
        return loads
    except (ImportError, AttributeError, TypeError, ValueError):
        import json

        return json.loads


loads = _loader()
