"""What a row must hold: one check per column, so a hand-edited or damaged value is named, not a traceback.

`Store._read` applies a table's checks to every row it reads; a value that
fails is a StoreCorrupt naming the table, the row, the column and the value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import datetime
from typing import Any


def shown(value: Any) -> str:
    return repr(value[:40] if isinstance(value, (str, bytes)) else value)


def is_iso_time(value: Any) -> bool:
    if not isinstance(value, str) or len(value) > 64:
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def is_iso_time_or_none(value: Any) -> bool:
    return value is None or is_iso_time(value)


def is_text(value: Any) -> bool:
    return isinstance(value, str)


def is_text_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


def is_rating(value: Any) -> bool:
    return isinstance(value, int) and 1 <= value <= 4


def is_count(value: Any) -> bool:
    return isinstance(value, int) and value >= 0


def is_count_or_none(value: Any) -> bool:
    return value is None or is_count(value)


def is_number_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and math.isfinite(value))


def _json(value: Any) -> Any:
    if not isinstance(value, str) or len(value) > 1_000_000:
        raise ValueError
    return json.loads(value)


def is_json_object(value: Any) -> bool:
    try:
        return isinstance(_json(value), dict)
    except (ValueError, RecursionError):
        return False


def is_json_object_or_none(value: Any) -> bool:
    return value is None or is_json_object(value)


def is_parameter_list(value: Any) -> bool:
    try:
        data = _json(value)
    except (ValueError, RecursionError):
        return False
    return (isinstance(data, list) and 0 < len(data) <= 64
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in data))


CHECK_NAMES: dict[Callable[[Any], bool], str] = {
    is_iso_time: "not an ISO 8601 time", is_iso_time_or_none: "not an ISO 8601 time",
    is_text: "not text", is_text_or_none: "not text", is_rating: "not a rating 1-4",
    is_count: "not a whole number >= 0", is_count_or_none: "not a whole number >= 0",
    is_number_or_none: "not a number", is_json_object: "not a JSON object",
    is_json_object_or_none: "not a JSON object", is_parameter_list: "not a JSON list of numbers",
}
REVIEW_CHECKS = {"question_id": is_text, "reviewed_at": is_iso_time, "rating": is_rating,
                  "answer": is_text_or_none, "duration_ms": is_count_or_none, "topic": is_text_or_none,
                  "source": is_text}
CARD_CHECKS = {"question_id": is_text, "card_json": is_json_object, "due": is_iso_time, "reps": is_count,
                "lapses": is_count}
ATTEMPT_CHECKS = {"exercise": is_text, "attempted_at": is_iso_time, "status": is_text,
                   "diagnosis": is_text_or_none, "tests_passed": is_count_or_none,
                   "tests_total": is_count_or_none, "elapsed_ms": is_count_or_none, "file": is_text_or_none}
MOCK_CHECKS = {"started_at": is_iso_time, "ended_at": is_iso_time_or_none, "status": is_text,
                "minutes": is_number_or_none, "exercise": is_text_or_none, "score": is_number_or_none,
                "report_json": is_json_object_or_none}
