"""`drill stats`: what the learner has done and what is coming, from the store alone.

Why compute then render: `compute_stats` is a pure function of the review
log, the cards and a clock, so tests check the numbers directly; the Rich
rendering is a thin layer on top. An empty store is a normal state (a first
run), not an error.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from drill.quiz.schedule import AGAIN, LEECH_LAPSES, parse_time
from drill.quiz.upcoming import Upcoming, describe, upcoming
from drill.store import Review

HISTORY_DAYS = 14
FORECAST_DAYS = 7
RETENTION_WEEKS = 12  # retention by week, this week and the 11 before it
WEAK_MIN_REVIEWS = 3
# A topic under this retention is weak: it is also where the retention bar stops being green.
WEAK_BELOW = 0.85


@dataclass(frozen=True)
class TopicRetention:
    topic: str
    reviews: int
    passed: int

    @property
    def retention(self) -> float:
        return self.passed / self.reviews if self.reviews else 0.0


@dataclass
class Stats:
    total_reviews: int = 0  # scheduled reviews (quiz and mock); cram answers are counted apart
    cram_reviews: int = 0
    hinted_reviews: int = 0  # scheduled reviews answered after reading a hint (counted within total_reviews)
    hint_capped_reviews: int = 0  # of those, rated Hard at most: the last hint, or a worked one, was read
    cards: int = 0
    per_day: list[tuple[date, int]] = field(default_factory=list)  # oldest first, HISTORY_DAYS entries
    cram_per_day: dict[date, int] = field(default_factory=dict)
    by_topic: list[TopicRetention] = field(default_factory=list)
    forecast: list[tuple[date, int]] = field(default_factory=list)  # today (incl. overdue) first
    # (first day of the week, scheduled reviews, not rated Again): weeks of 7 days ending today, oldest first
    by_week: list[tuple[date, int, int]] = field(default_factory=list)
    upcoming: Upcoming = field(default_factory=Upcoming)  # due now, and when the next cards come due
    next_due: str = ""  # that, as the line the quiz shows at the end of a session
    weakest: list[TopicRetention] = field(default_factory=list)
    unranked: list[TopicRetention] = field(default_factory=list)  # too few reviews to be ranked weakest
    leeches: list[tuple[str, int]] = field(default_factory=list)  # (question id, lapses)


def scheduled_reviews(reviews: Iterable[Review]) -> list[Review]:
    """The reviews that tell how well something is remembered: quiz and mock answers.

    Cram answers are left out: a cram session re-asks what the learner just
    chose to practise, often several times in a row, without scheduling, so
    counting them would make a topic look remembered (or forgotten) on the
    strength of minutes-old repetitions.
    """
    return [r for r in reviews if r.source != "cram"]


def topic_retention(reviews: Iterable[Review]) -> list[TopicRetention]:
    """Per topic (alphabetical): scheduled reviews and how many were not rated Again."""
    total: Counter[str] = Counter()
    passed: Counter[str] = Counter()
    for review in scheduled_reviews(reviews):
        topic = review.topic or "?"
        total[topic] += 1
        passed[topic] += review.rating != AGAIN
    return sorted((TopicRetention(t, total[t], passed[t]) for t in total), key=lambda r: r.topic)


def weekly_retention(reviews: Iterable[Review], today: date,
                     weeks: int = RETENTION_WEEKS) -> list[tuple[date, int, int]]:
    """(first day, scheduled reviews, not rated Again) per 7-day week ending today, oldest first.

    Weeks end today rather than on a calendar Sunday, so the last point is always a full week."""
    total: Counter[int] = Counter()
    passed: Counter[int] = Counter()
    for review in scheduled_reviews(reviews):
        ago = (today - parse_time(review.reviewed_at).astimezone().date()).days // 7
        if 0 <= ago < weeks:
            total[ago] += 1
            passed[ago] += review.rating != AGAIN
    return [(today - timedelta(days=7 * ago + 6), total[ago], passed[ago]) for ago in range(weeks - 1, -1, -1)]


def weakest_topics(reviews: Iterable[Review], limit: int = 3) -> list[TopicRetention]:
    """Weak topics, weakest first (ties: more reviews first, then by name): retention under
    WEAK_BELOW on at least WEAK_MIN_REVIEWS scheduled reviews.

    The one definition of "weakest topics": `drill stats` and the mock's report card
    both call it (with `store.reviews()`) and both state WEAKEST_RULE on screen. Why a
    minimum: one or two answers say little, and a topic at 0% on one miss would push a
    topic that is really weak (4 misses in 6) off the list. Why a ceiling: the lowest of
    topics that are all remembered well is not a weakness worth a drill.
    """
    weak = (r for r in topic_retention(reviews) if r.reviews >= WEAK_MIN_REVIEWS and r.retention < WEAK_BELOW)
    return sorted(weak, key=lambda r: (r.retention, -r.reviews, r.topic))[:limit]


def unranked_topics(reviews: Iterable[Review]) -> list[TopicRetention]:
    """Topics with scheduled reviews, but fewer than WEAK_MIN_REVIEWS: not ranked yet (alphabetical)."""
    return [r for r in topic_retention(reviews) if r.reviews < WEAK_MIN_REVIEWS]


# What makes a topic weak, in the words both `drill stats` and the mock's card show.
WEAKEST_RULE = f"under {WEAK_BELOW:.0%} retention with at least {WEAK_MIN_REVIEWS} scheduled reviews"


def compute_stats(reviews: Iterable[Review], cards: Mapping[str, Mapping[str, Any]], now: datetime) -> Stats:
    """All numbers `drill stats` shows; days are the learner's local calendar days.
    Retention, weakest topics and the per-day counts use scheduled reviews only;
    cram answers are counted apart (they never make cards, so the forecast is untouched)."""
    reviews = list(reviews)
    today = now.astimezone().date()
    stats = Stats(cards=len(cards))
    day_counts: Counter[date] = Counter()
    cram_days: Counter[date] = Counter()
    for review in reviews:
        day = parse_time(review.reviewed_at).astimezone().date()
        if review.source == "cram":
            stats.cram_reviews += 1
            cram_days[day] += 1
        else:
            stats.total_reviews += 1
            day_counts[day] += 1
            stats.hinted_reviews += review.hints_shown > 0
            stats.hint_capped_reviews += review.hint_capped
    days = [today - timedelta(days=i) for i in range(HISTORY_DAYS - 1, -1, -1)]
    stats.per_day = [(d, day_counts[d]) for d in days]
    stats.cram_per_day = {d: cram_days[d] for d in days if cram_days[d]}
    stats.by_topic = topic_retention(reviews)
    stats.by_week = weekly_retention(reviews, today)
    stats.weakest = weakest_topics(reviews)
    stats.unranked = unranked_topics(reviews)
    due_counts: Counter[date] = Counter()
    for card in cards.values():
        day = max(parse_time(card["due"]).astimezone().date(), today)
        due_counts[day] += 1
    stats.forecast = [(today + timedelta(days=i), due_counts[today + timedelta(days=i)]) for i in range(FORECAST_DAYS)]
    stats.upcoming = upcoming(cards.values(), now)
    stats.next_due = describe(stats.upcoming, now)
    stats.leeches = sorted(
        ((qid, int(card["lapses"])) for qid, card in cards.items() if int(card["lapses"]) >= LEECH_LAPSES),
        key=lambda item: -item[1],
    )
    return stats


def _bar(value: float, maximum: float, width: int = 24) -> str:
    if maximum <= 0 or value <= 0:
        return ""
    return "█" * max(1, round(width * value / maximum))


def render_stats(stats: Stats, console: Any, prompts: Mapping[str, str] | None = None,
                 chart_width: int | None = None) -> None:
    """Everything `drill stats` shows, section by section; `prompts` names the leeches' questions.

    With `chart_width` (a terminal wide enough, colour allowed), retention by week and the forecast are
    charts (drill/quiz/stats_charts.py); without it, or where a chart does not fit, they are tables."""
    from rich.text import Text

    from drill.quiz.stats_charts import forecast_chart, weekly_chart

    _render_totals(stats, console)
    # Titles are printed as their own lines: a Table title wraps to the (narrow) table's width.
    console.print(Text(f"Reviews per day (last {HISTORY_DAYS} days)", style="bold"))
    console.print(_days_table(stats))
    console.print(Text("Retention by topic (share of scheduled reviews not rated Again)", style="bold"))
    console.print(_topics_table(stats))
    console.print(Text(f"Retention by week (last {RETENTION_WEEKS} weeks, share not rated Again)", style="bold"))
    weekly = weekly_chart(stats, chart_width)
    console.print(Text(weekly) if weekly is not None else _weeks_table(stats))
    console.print(Text(f"Due in the next {FORECAST_DAYS} days (today includes overdue)", style="bold"))
    forecast = forecast_chart(stats, chart_width)
    console.print(Text(forecast) if forecast is not None else _forecast_table(stats))
    if stats.cards:
        console.print(Text(f"due now: {stats.upcoming.due_now}" + (f"; {stats.next_due}" if stats.next_due else ""),
                           style="dim"))
    _render_weakest(stats, console)
    _render_leeches(stats, console, prompts or {})


def _render_totals(stats: Stats, console: Any) -> None:
    from rich.text import Text

    cram = ""
    if stats.cram_reviews:
        cram = f" (+ {stats.cram_reviews} cram answer{'s' * (stats.cram_reviews != 1)}, not scheduled)"
    reviews = f"{stats.total_reviews} review{'s' * (stats.total_reviews != 1)}"
    console.print(Text(f"{reviews}, {stats.cards} card{'s' * (stats.cards != 1)} scheduled{cram}", style="bold"))
    if stats.hinted_reviews:
        console.print(Text(f"{stats.hinted_reviews} of them answered after a hint, {stats.hint_capped_reviews} "
                           "hint-capped (the last or a worked hint read: rated Hard at most)", style="dim"))
    if not stats.total_reviews and not stats.cram_reviews:
        console.print(Text("No reviews yet — start with `drill quiz`.", style="dim"))
    elif stats.cram_reviews:
        console.print(Text("Cram answers are practice: they are not in retention, weakest topics or the forecast.",
                           style="dim"))


def _days_table(stats: Stats) -> Any:
    from rich.table import Table
    from rich.text import Text

    days = Table()
    days.add_column("day")
    days.add_column("reviews", justify="right")
    if stats.cram_per_day:
        days.add_column("cram", justify="right")
    days.add_column("")
    peak = max((n for _, n in stats.per_day), default=0)
    for day, n in stats.per_day:
        cram_cell = [f"+{stats.cram_per_day[day]}" if day in stats.cram_per_day else ""] if stats.cram_per_day else []
        days.add_row(f"{day:%a %m-%d}", str(n), *cram_cell, Text(_bar(n, peak), style="cyan"))
    return days


def _topics_table(stats: Stats) -> Any:
    """Retention per topic; a topic with too few reviews to be ranked weakest says so on its row."""
    from rich.table import Table
    from rich.text import Text

    topics = Table()
    topics.add_column("topic")
    topics.add_column("reviews", justify="right")
    topics.add_column("retention", justify="right")
    topics.add_column("")
    for row in stats.by_topic:
        style = "green" if row.retention >= WEAK_BELOW else "yellow" if row.retention >= 0.7 else "red"
        bar = Text(_bar(row.retention, 1.0, 20), style=style)
        if row.reviews < WEAK_MIN_REVIEWS:
            bar.append(f"{' ' * bool(bar)}not ranked yet", style="dim")
        topics.add_row(row.topic, str(row.reviews), f"{row.retention:.0%}", bar)
    if not stats.by_topic:
        topics.add_row("—", "0", "—", "")
    return topics


def _weeks_table(stats: Stats) -> Any:
    from rich.table import Table
    from rich.text import Text

    weeks = Table()
    weeks.add_column("week of")
    weeks.add_column("reviews", justify="right")
    weeks.add_column("retention", justify="right")
    weeks.add_column("")
    for start, n, ok in stats.by_week:
        if n:
            weeks.add_row(f"{start:%m-%d}", str(n), f"{ok / n:.0%}", Text(_bar(ok / n, 1.0, 20), style="green"))
    if not any(n for _, n, _ in stats.by_week):
        weeks.add_row("—", "0", "—", "")
    return weeks


def _forecast_table(stats: Stats) -> Any:
    from rich.table import Table
    from rich.text import Text

    forecast = Table()
    forecast.add_column("day")
    forecast.add_column("due", justify="right")
    forecast.add_column("")
    peak = max((n for _, n in stats.forecast), default=0)
    for day, n in stats.forecast:
        forecast.add_row(f"{day:%a %m-%d}", str(n), Text(_bar(n, peak), style="magenta"))
    return forecast


def _render_leeches(stats: Stats, console: Any, prompts: Mapping[str, str]) -> None:
    from rich.text import Text

    if not stats.leeches:
        console.print(Text("No leeches.", style="dim"))
        return
    console.print(Text(f"Leeches (≥{LEECH_LAPSES} lapses): rewrite your notes on these", style="bold red"))
    for qid, lapses in stats.leeches:
        prompt = prompts.get(qid, "")
        short = (prompt.splitlines()[0][:70] if prompt else "")
        console.print(Text(f"  {qid} — {lapses} lapses" + (f" — {short}" if short else "")))


def _render_weakest(stats: Stats, console: Any) -> None:
    """The weakest topics and the rule that ranks them, with the topics it leaves out and why."""
    from rich.text import Text

    if not stats.by_topic:
        return
    if stats.weakest:
        names = ", ".join(f"{r.topic} ({r.retention:.0%})" for r in stats.weakest)
        console.print(Text(f"Weakest topics: {names}", style="yellow"))
    else:
        console.print(Text("Weakest topics: none", style="green"))
    console.print(Text(f"  weak = {WEAKEST_RULE}", style="dim"))
    if stats.unranked:
        few = ", ".join(f"{r.topic} ({r.reviews})" for r in stats.unranked)
        console.print(Text(f"  not ranked yet (fewer reviews): {few}", style="dim"))


def show_stats(bank: Path | None = None, *, console: Any = None, now: datetime | None = None) -> None:
    """Open the store read-only, compute and print; the bank is only used to show leech prompts.

    Read-only: stats never writes, so it works on a store whose file, folder or
    disk is read-only, or that another drill holds locked, saying so in a dim
    line on stderr (stdout stays clean for pipes)."""
    from rich.console import Console
    from rich.text import Text

    from drill.store import open_store

    width = None
    if console is None:  # the real terminal: a chart where it is wide enough and colour is allowed
        import os
        import sys

        from drill.charts import chart_width

        width = None if os.environ.get("NO_COLOR") else chart_width(sys.stdout)
    console = console or Console(highlight=False)
    now = now or datetime.now(timezone.utc)
    with open_store(read_only=True) as store:  # showing progress must work on a store nobody can write
        reviews = store.reviews()
        cards = store.cards()
        note = store.note
    if note:
        Console(stderr=True, highlight=False, soft_wrap=True).print(Text(f"note: {note}", style="dim"))
    prompts: dict[str, str] = {}
    stats = compute_stats(reviews, cards, now)
    if stats.leeches:
        try:
            from drill.quiz.loader import load_bank

            prompts = {q.id: q.prompt for q in load_bank(bank).questions}
        except Exception:  # noqa: BLE001 - stats must work even when the bank is broken
            prompts = {}
    render_stats(stats, console, prompts, chart_width=width)
