"""`drill optimize`: fit FSRS's parameters to the learner's own review log, and use them from then on.

Why a minimum: the fsrs package's Optimizer learns only from reviews made at
least a day after the card's previous review (same-day repeats say nothing
about forgetting), among each card's first MAX_SEQ_LEN reviews, and with fewer
than one mini-batch (MIN_REVIEWS) of them it returns FSRS's defaults
unchanged. So drill counts those reviews the same way first, and says how
many more are needed instead of pretending to fit. The optimizer needs torch
and pandas (the `fsrs[optimizer]` extra): they are imported here, inside the
command, never on the quiz's path.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from drill.errors import UserError
from drill.quiz.schedule import parse_time
from drill.store import Review, Store

MIN_REVIEWS = 512  # fsrs.optimizer's mini_batch_size: below it compute_optimal_parameters returns the defaults
MAX_SEQ_LEN = 64  # fsrs.optimizer's max_seq_len: only each card's first 64 reviews are used


def usable_reviews(log: Iterable[Review]) -> int:
    """Reviews the optimizer learns from: among each card's first MAX_SEQ_LEN, those made
    one day (24 h) or more after that card's previous review."""
    times: dict[str, list] = defaultdict(list)  # type: ignore[type-arg]
    for review in log:
        times[review.question_id].append(parse_time(review.reviewed_at))
    count = 0
    for history in times.values():
        history = sorted(history)[:MAX_SEQ_LEN]
        count += sum(1 for before, after in zip(history, history[1:], strict=False) if (after - before).days > 0)
    return count


@dataclass(frozen=True)
class Fitted:
    parameters: list[float]
    reviews: int  # usable reviews they were fitted on
    total: int  # scheduled reviews in the log


def fit(store: Store) -> Fitted:
    """Fit and save the parameters; UserError saying how many more reviews are needed."""
    log = [review for review, _card in store.scheduled_log()]
    usable = usable_reviews(log)
    if usable < MIN_REVIEWS:
        raise UserError(
            f"drill optimize needs {MIN_REVIEWS} reviews made a day or more after the card's previous review; "
            f"you have {usable} (of {len(log)} scheduled reviews): {MIN_REVIEWS - usable} more — keep doing "
            "`drill quiz` on the days cards are due")
    parameters = _optimize(log)
    _check(parameters)
    store.record_parameters(parameters, usable)
    return Fitted(parameters, usable, len(log))


def _optimize(log: list[Review]) -> list[float]:
    try:
        from fsrs import Optimizer, Rating, ReviewLog
    except ImportError as exc:  # fsrs without its optimizer extra (torch, pandas, tqdm)
        raise UserError(
            f"the FSRS optimizer cannot be loaded ({exc}); install it with pip install 'fsrs[optimizer]'") from None
    ids = {qid: index for index, qid in enumerate(sorted({r.question_id for r in log}), start=1)}
    logs = [
        ReviewLog(card_id=ids[r.question_id], rating=Rating(r.rating), review_datetime=parse_time(r.reviewed_at),
                  review_duration=r.duration_ms)
        for r in log
    ]
    try:
        return [float(p) for p in Optimizer(logs).compute_optimal_parameters()]
    except Exception as exc:  # noqa: BLE001 - a numerical failure inside torch: say so in one line
        raise UserError(f"the FSRS optimizer failed on this log ({type(exc).__name__}: {exc}); your schedule is "
                        "unchanged") from None


def _check(parameters: list[float]) -> None:
    """Only parameters fsrs's own Scheduler accepts are saved."""
    import fsrs

    if not parameters or not all(math.isfinite(p) for p in parameters):
        raise UserError("the FSRS optimizer returned non-finite parameters; your schedule is unchanged")
    try:
        fsrs.Scheduler(parameters=tuple(parameters))
    except (ValueError, TypeError) as exc:
        raise UserError(
            f"the FSRS optimizer returned parameters fsrs refuses ({exc}); your schedule is unchanged") from None
