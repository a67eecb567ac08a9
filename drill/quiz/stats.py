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
from drill.store import Review

HISTORY_DAYS = 14
FORECAST_DAYS = 7
WEAK_MIN_REVIEWS = 3


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
    total_reviews: int = 0
    cards: int = 0
    per_day: list[tuple[date, int]] = field(default_factory=list)  # oldest first, HISTORY_DAYS entries
    by_topic: list[TopicRetention] = field(default_factory=list)
    forecast: list[tuple[date, int]] = field(default_factory=list)  # today (incl. overdue) first
    weakest: list[TopicRetention] = field(default_factory=list)
    leeches: list[tuple[str, int]] = field(default_factory=list)  # (question id, lapses)


def compute_stats(reviews: Iterable[Review], cards: Mapping[str, Mapping[str, Any]], now: datetime) -> Stats:
    """All numbers `drill stats` shows; days are the learner's local calendar days."""
    today = now.astimezone().date()
    stats = Stats(cards=len(cards))
    day_counts: Counter[date] = Counter()
    topic_total: Counter[str] = Counter()
    topic_passed: Counter[str] = Counter()
    for review in reviews:
        stats.total_reviews += 1
        day_counts[parse_time(review.reviewed_at).astimezone().date()] += 1
        topic = review.topic or "?"
        topic_total[topic] += 1
        topic_passed[topic] += review.rating != AGAIN
    stats.per_day = [(d, day_counts[d]) for d in (today - timedelta(days=i) for i in range(HISTORY_DAYS - 1, -1, -1))]
    stats.by_topic = sorted(
        (TopicRetention(t, topic_total[t], topic_passed[t]) for t in topic_total), key=lambda r: r.topic
    )
    stats.weakest = sorted(
        (r for r in stats.by_topic if r.reviews >= WEAK_MIN_REVIEWS), key=lambda r: (r.retention, -r.reviews)
    )[:3]
    due_counts: Counter[date] = Counter()
    for card in cards.values():
        day = max(parse_time(card["due"]).astimezone().date(), today)
        due_counts[day] += 1
    stats.forecast = [(today + timedelta(days=i), due_counts[today + timedelta(days=i)]) for i in range(FORECAST_DAYS)]
    stats.leeches = sorted(
        ((qid, int(card["lapses"])) for qid, card in cards.items() if int(card["lapses"]) >= LEECH_LAPSES),
        key=lambda item: -item[1],
    )
    return stats


def _bar(value: float, maximum: float, width: int = 24) -> str:
    if maximum <= 0 or value <= 0:
        return ""
    return "█" * max(1, round(width * value / maximum))


def render_stats(stats: Stats, console: Any, prompts: Mapping[str, str] | None = None) -> None:
    from rich.table import Table
    from rich.text import Text

    prompts = prompts or {}
    console.print(Text(f"{stats.total_reviews} reviews, {stats.cards} cards scheduled", style="bold"))
    if not stats.total_reviews:
        console.print(Text("No reviews yet — start with `drill quiz`.", style="dim"))

    # Titles are printed as their own lines: a Table title wraps to the (narrow) table's width.
    console.print(Text(f"Reviews per day (last {HISTORY_DAYS} days)", style="bold"))
    days = Table()
    days.add_column("day")
    days.add_column("reviews", justify="right")
    days.add_column("")
    peak = max((n for _, n in stats.per_day), default=0)
    for day, n in stats.per_day:
        days.add_row(f"{day:%a %m-%d}", str(n), Text(_bar(n, peak), style="cyan"))
    console.print(days)

    console.print(Text("Retention by topic (share of reviews not rated Again)", style="bold"))
    topics = Table()
    topics.add_column("topic")
    topics.add_column("reviews", justify="right")
    topics.add_column("retention", justify="right")
    topics.add_column("")
    for row in stats.by_topic:
        style = "green" if row.retention >= 0.85 else "yellow" if row.retention >= 0.7 else "red"
        topics.add_row(row.topic, str(row.reviews), f"{row.retention:.0%}", Text(_bar(row.retention, 1.0, 20), style=style))
    if not stats.by_topic:
        topics.add_row("—", "0", "—", "")
    console.print(topics)

    console.print(Text(f"Due in the next {FORECAST_DAYS} days (today includes overdue)", style="bold"))
    forecast = Table()
    forecast.add_column("day")
    forecast.add_column("due", justify="right")
    forecast.add_column("")
    peak = max((n for _, n in stats.forecast), default=0)
    for day, n in stats.forecast:
        forecast.add_row(f"{day:%a %m-%d}", str(n), Text(_bar(n, peak), style="magenta"))
    console.print(forecast)

    if stats.weakest:
        console.print(Text("Weakest topics: " + ", ".join(f"{r.topic} ({r.retention:.0%})" for r in stats.weakest), style="yellow"))
    if stats.leeches:
        console.print(Text(f"Leeches (≥{LEECH_LAPSES} lapses): rewrite your notes on these", style="bold red"))
        for qid, lapses in stats.leeches:
            prompt = prompts.get(qid, "")
            short = (prompt.splitlines()[0][:70] if prompt else "")
            console.print(Text(f"  {qid} — {lapses} lapses" + (f" — {short}" if short else "")))
    else:
        console.print(Text("No leeches.", style="dim"))


def show_stats(bank: Path | None = None, *, console: Any = None, now: datetime | None = None) -> None:
    """Open the store read-only, compute and print; the bank is only used to show leech prompts.

    Read-only: stats never writes, so it works on a store whose file, folder or
    disk is read-only, or that another drill holds locked, saying so in a dim
    line on stderr (stdout stays clean for pipes)."""
    from rich.console import Console
    from rich.text import Text

    from drill.store import open_store

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
    render_stats(stats, console, prompts)
