#!/usr/bin/env python3
"""The reports at volume: scripts/bench analytics runs this (docs/BENCHMARKS.md, "Reports").

Generates shop traffic (documented below), stores it as Datong stores it (COPY into the
collector's partitions, merges in identity.user_map, the collector's own rollup look), then times
every report function cold and warm as datong_analyst would call it, and the same report on
ClickHouse (chDB, in this benchmark only) over the same rows, checking that both give the same
answer.

The traffic, for `events` events: people = events / 60, over 60 days ending yesterday (project
days, Asia/Shanghai). Each person has a platform (iOS 35%, Android 35%, web 30%), a city, a
weekly rhythm (weekdays busier, Saturday least) and a daily one (peaks at noon and 21:00); on
an active day they make 1-3 visits: $AppStart (apps) or $pageview (web), 1-6 ViewProduct, then
with falling odds AddToCart, SubmitOrder, PayOrder (with a price). App visits open an H5 page
in 20% of the cases (its events are js, hybrid_h5). 30% of people start anonymous and log in
during a visit: their events before it are stored under an anonymous user that the login merges
into the person (identity.user_map), as identity-service does.
"""
import argparse
import datetime as dt
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import time
import uuid

ZONE = "Asia/Shanghai"
OFFSET = dt.timedelta(hours=8)  # Shanghai has no daylight saving time.
PROJECT = "shop"
CITIES = [("北京", "北京"), ("上海", "上海"), ("广东", "广州"), ("广东", "深圳"), ("浙江", "杭州"), ("四川", "成都"), ("湖北", "武汉"),
          ("湖南", "长沙"), ("江苏", "南京"), ("陕西", "西安")]
EVENTS = ["$AppStart", "$pageview", "ViewProduct", "AddToCart", "SubmitOrder", "PayOrder"]


def say(message):
    print(f"==> {message}", flush=True)


def psql(url, sql, *, stdin=None, timing=False):
    """Runs `sql` with psql; returns its output (and the times psql printed, in ms)."""
    command = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-At", url]
    if timing:
        sql = "\\timing on\n" + sql
    process = subprocess.run(command, input=sql if stdin is None else stdin, capture_output=True, text=True)
    if process.returncode != 0:
        raise SystemExit(f"psql failed: {process.stderr.strip()[:2000]}")
    if not timing:
        return process.stdout
    times = [float(m) for m in re.findall(r"^Time: ([0-9.]+) ms", process.stdout, re.M)]
    lines = [line for line in process.stdout.splitlines() if not line.startswith("Time: ")]
    return lines, times


class Traffic:
    """The generator: yields (time UTC, event, stored user, lib, app_version, hybrid, properties)."""

    def __init__(self, events, seed=2026):
        self.random = random.Random(seed)
        self.people = max(10, events // 60)
        self.target = events
        today = (dt.datetime.now(dt.timezone.utc) + OFFSET).date()
        self.first_day = today - dt.timedelta(days=60)
        self.merges = []  # (anonymous user, person)

    def rows(self):
        r = self.random
        weekday_weight = [1.0, 1.0, 1.0, 1.05, 1.15, 0.8, 0.9]
        hours = [0.3, 0.15, 0.1, 0.05, 0.05, 0.1, 0.3, 0.6, 0.9, 1.0, 1.1, 1.3, 1.5, 1.3, 1.1, 1.0, 1.0, 1.1, 1.3, 1.5, 1.8, 2.0, 1.6, 0.9]
        produced = 0
        next_user = 1
        # Each person's share of all activity follows a long tail: a few come back every day.
        people = []
        for _ in range(self.people):
            platform = r.choices(["iOS", "Android", "web"], [35, 35, 30])[0]
            province, city = r.choice(CITIES)
            engagement = r.paretovariate(1.5)
            person = next_user
            next_user += 1
            anonymous = None
            if r.random() < 0.3:
                anonymous = next_user
                next_user += 1
                self.merges.append((anonymous, person))
            people.append((person, anonymous, platform, province, city, engagement))
        total_engagement = sum(p[5] for p in people)
        # A visit is 5.15 events on average (1 + 3.5 views + 0.35 × (1 + 0.5 × (1 + 0.7))): a little
        # more than enough visits, the last cut at the target.
        visits_needed = self.target / 5.0
        for person, anonymous, platform, province, city, engagement in people:
            visits = max(1, int(round(visits_needed * engagement / total_engagement)))
            logged_in = anonymous is None
            version = r.choice(["5.2.0", "5.3.0", "5.3.1", "6.0.0"])
            for _ in range(visits):
                while True:
                    day = self.first_day + dt.timedelta(days=r.randrange(60))
                    if r.random() < weekday_weight[day.weekday()] / 1.15:
                        break
                hour = r.choices(range(24), hours)[0]
                local = dt.datetime.combine(day, dt.time(hour)) + dt.timedelta(seconds=r.randrange(3600))
                at = (local - OFFSET).replace(tzinfo=dt.timezone.utc)
                h5 = platform != "web" and r.random() < 0.2
                if not logged_in and r.random() < 0.5:
                    logged_in = True
                user = person if logged_in else anonymous
                base = {"$city": city, "$province": province}
                if platform == "web":
                    lib, first = "js", "$pageview"
                else:
                    lib, first = platform, "$AppStart"
                steps = [(first, lib, {**base, "$is_first_day": False})]
                for _ in range(r.randint(1, 6)):
                    steps.append(("ViewProduct", "js" if h5 else lib, {**base, "product_id": r.randrange(5000), "price": r.randrange(1, 2000)}))
                if r.random() < 0.35:
                    price = r.randrange(10, 2000)
                    steps.append(("AddToCart", "js" if h5 else lib, {**base, "price": price}))
                    if r.random() < 0.5:
                        steps.append(("SubmitOrder", lib, {**base, "price": price}))
                        if r.random() < 0.7:
                            steps.append(("PayOrder", lib, {**base, "price": price, "pay_method": r.choice(["alipay", "wechat", "card"])}))
                for event, event_lib, properties in steps:
                    # Milliseconds too: two events of one person in one second would be a tie, which
                    # ClickHouse's windowFunnel breaks in no set order (and Datong as a chain allows).
                    at += dt.timedelta(seconds=r.randint(2, 240), milliseconds=r.randrange(1000))
                    yield at, event, user, event_lib, None if event_lib == "js" and not h5 else version, h5 and event_lib == "js", properties
                    produced += 1
                    if produced >= self.target:
                        return


def load(url, events):
    """Stores the traffic; returns (events, people, merges)."""
    traffic = Traffic(events)
    months = set()
    say(f"generating and loading {events} events of {traffic.people} people")
    ch = open(CH_FILE, "w")
    canonical = {}
    written = 0
    pending = []

    def month_tables(at):
        key = (at.year, at.month)
        if key in months:
            return
        months.add(key)
        nxt = (at.year + at.month // 12, at.month % 12 + 1)
        psql(url, f"""
            CREATE TABLE IF NOT EXISTS collector.events_{at.year:04d}_{at.month:02d} PARTITION OF collector.events
                FOR VALUES FROM ('{at.year:04d}-{at.month:02d}-01 00:00:00+00') TO ('{nxt[0]:04d}-{nxt[1]:02d}-01 00:00:00+00') PARTITION BY LIST (project);
            CREATE TABLE IF NOT EXISTS collector.events_{at.year:04d}_{at.month:02d}_{PROJECT} PARTITION OF collector.events_{at.year:04d}_{at.month:02d}
                FOR VALUES IN ('{PROJECT}');""")

    # Months first (a COPY cannot wait for DDL), from the range the traffic spans.
    day = traffic.first_day - dt.timedelta(days=1)
    while day <= traffic.first_day + dt.timedelta(days=62):
        month_tables(dt.datetime.combine(day, dt.time()))
        day += dt.timedelta(days=1)
    copy = subprocess.Popen(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", url, "-c",
                             "COPY collector.events (project, time, event_id, type, event, received_at, distinct_id, user_id, lib, app_version, "
                             "hybrid_h5, properties, track_id) FROM STDIN"], stdin=subprocess.PIPE, text=True)
    for at, event, user, lib, version, hybrid, properties in traffic.rows():
        stamp = at.strftime("%Y-%m-%d %H:%M:%S.%f+00")
        props = json.dumps(properties, ensure_ascii=False, separators=(",", ":"))
        copy.stdin.write(
            f"{PROJECT}\t{stamp}\t{uuid.UUID(int=traffic.random.getrandbits(128), version=4)}\ttrack\t{event}\t{stamp}\td{user}\t{user}\t{lib}\t"
            f"{version or NULL}\t{'t' if hybrid else 'f'}\t{props.replace(chr(92), chr(92) * 2)}\t{written + 1}\n")
        pending.append(((at - EPOCH) // dt.timedelta(milliseconds=1), event, user, lib, properties.get("$city", ""), properties.get("price", 0)))
        written += 1
        if len(pending) >= 100_000:
            flush_ch(ch, pending, canonical, traffic)
            pending = []
        if written % 1_000_000 == 0:
            say(f"  {written} events")
    flush_ch(ch, pending, canonical, traffic)
    ch.close()
    copy.stdin.close()
    if copy.wait() != 0:
        raise SystemExit("COPY failed")
    merges = "\n".join(f"{PROJECT}\t{a}\t{p}" for a, p in traffic.merges)
    psql(url, "COPY identity.user_map (project, user_id, canonical_user_id) FROM STDIN;\n" + merges + "\n\\.\n", stdin=None)
    return written, traffic.people, len(traffic.merges)


CH_FILE = "/tmp/datong-analytics-bench.tsv"
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
NULL = "\\N"


def flush_ch(handle, rows, canonical, traffic):
    merged = dict(traffic.merges)
    for stamp, event, user, lib, city, price in rows:
        handle.write(f"{stamp}\t{event}\t{merged.get(user, user)}\t{lib}\t{city}\t{price}\n")


def reports(first, last):
    """(name, PostgreSQL call, ClickHouse query) of each report, over project days first … last."""
    d30, d7 = last - dt.timedelta(days=29), last - dt.timedelta(days=6)
    span = lambda a, b: (f"time >= toDateTime('{a} 00:00:00', '{ZONE}') AND time < toDateTime('{b + dt.timedelta(days=1)} 00:00:00', '{ZONE}')")
    day = f"toDate(time, '{ZONE}')"
    return [
        ("events a day per event, 30 days",
         f"SELECT bucket::date, event, value FROM analytics.event_trend('{PROJECT}', ARRAY{EVENTS}, '{d30}', '{last}') ORDER BY 1, 2",
         f"SELECT {day} d, event, count() FROM events WHERE {span(d30, last)} GROUP BY d, event ORDER BY d, event"),
        ("daily active users by platform, 30 days",
         f"SELECT bucket::date, group_value, value FROM analytics.event_trend('{PROJECT}', ARRAY['*'], '{d30}', '{last}', measure => 'people', group_by => 'lib') ORDER BY 1, 2",
         f"SELECT {day} d, lib, uniqExact(user) FROM events WHERE {span(d30, last)} GROUP BY d, lib ORDER BY d, lib"),
        ("paying users by city, 7 days",
         f"SELECT group_value, sum(value) FROM analytics.event_trend('{PROJECT}', ARRAY['PayOrder'], '{d7}', '{last}', 'all', 'people', group_by => '$city', top => 20) GROUP BY 1 ORDER BY 1",
         None),
        ("paid amount a day, 30 days",
         f"SELECT bucket::date, value FROM analytics.event_trend('{PROJECT}', ARRAY['PayOrder'], '{d30}', '{last}', measure => 'sum', property => 'price') ORDER BY 1",
         f"SELECT {day} d, sum(price) FROM events WHERE event = 'PayOrder' AND {span(d30, last)} GROUP BY d ORDER BY d"),
        ("4-step funnel within a day, 7 days",
         f"SELECT step, people FROM analytics.funnel('{PROJECT}', '[\"ViewProduct\",\"AddToCart\",\"SubmitOrder\",\"PayOrder\"]', '{d7}', '{last}', 86400) ORDER BY step",
         None),
        ("4-step funnel within a day, 30 days",
         f"SELECT step, people FROM analytics.funnel('{PROJECT}', '[\"ViewProduct\",\"AddToCart\",\"SubmitOrder\",\"PayOrder\"]', '{d30}', '{last}', 86400) ORDER BY step",
         None),
        ("7-day retention of 14 daily cohorts",
         f"SELECT cohort, period, returned FROM analytics.retention('{PROJECT}', 'ViewProduct', 'ViewProduct', '{last - dt.timedelta(days=20)}', '{last - dt.timedelta(days=7)}', periods => 7) ORDER BY 1, 2",
         None),
        ("orders a person, 30 days",
         f"SELECT bucket_from, people FROM analytics.distribution('{PROJECT}', 'SubmitOrder', '{d30}', '{last}') WHERE people > 0 ORDER BY 1",
         None),
        ("a person's newest 100 events",
         f"SELECT count(*) FROM analytics.user_events('{PROJECT}', 1)",
         None),
    ]


def ch_reports(first, last):
    """The ClickHouse side of the reports ClickHouse's own functions answer (windowFunnel, retention)."""
    d30, d7 = last - dt.timedelta(days=29), last - dt.timedelta(days=6)
    day = f"toDate(time, '{ZONE}')"
    span = lambda a, b, extra=0: (f"time >= toDateTime('{a} 00:00:00', '{ZONE}') AND time < toDateTime('{b + dt.timedelta(days=1 + extra)} 00:00:00', '{ZONE}')")
    funnel = lambda a: (f"SELECT level, count() FROM (SELECT user, windowFunnel(86400000, 'strict_increase')(toUInt64(toUnixTimestamp64Milli(time)), event = 'ViewProduct' AND {span(a, last)}, event = 'AddToCart', "
                        f"event = 'SubmitOrder', event = 'PayOrder') AS level FROM events WHERE {span(a, last, 1)} "
                        f"AND event IN ('ViewProduct','AddToCart','SubmitOrder','PayOrder') GROUP BY user) WHERE level > 0 GROUP BY level ORDER BY level")
    c0, c1 = last - dt.timedelta(days=20), last - dt.timedelta(days=7)
    return {
        "paying users by city, 7 days":
            f"SELECT city, uniqExact(user) FROM events WHERE event = 'PayOrder' AND {span(d7, last)} GROUP BY city ORDER BY city",
        "4-step funnel within a day, 7 days": funnel(d7),
        "4-step funnel within a day, 30 days": funnel(d30),
        "7-day retention of 14 daily cohorts":
            f"SELECT cohort, k, uniqExact(user) FROM (SELECT user, {day} AS cohort FROM events WHERE event = 'ViewProduct' AND {span(c0, c1)} GROUP BY user, cohort) s "
            f"INNER JOIN (SELECT user, {day} AS at FROM events WHERE event = 'ViewProduct' AND {span(c0, last)} GROUP BY user, at) r USING user "
            f"ARRAY JOIN [dateDiff('day', cohort, at)] AS k WHERE k BETWEEN 1 AND 7 GROUP BY cohort, k ORDER BY cohort, k",
        "orders a person, 30 days":
            f"SELECT b, count() FROM (SELECT user, count() AS n FROM events WHERE event = 'SubmitOrder' AND {span(d30, last)} GROUP BY user) "
            f"ARRAY JOIN [multiIf(n < 2, 1, n < 3, 2, n < 4, 3, n < 5, 4, n < 6, 5, n < 11, 6, n < 21, 11, n < 51, 21, n < 101, 51, 101)] AS b GROUP BY b ORDER BY b",
        "a person's newest 100 events": "SELECT count() FROM (SELECT * FROM events WHERE user = 1 ORDER BY time DESC LIMIT 100)",
    }


def canonical_pg(name, lines):
    """PostgreSQL's answer in the shape of ClickHouse's, to compare them."""
    rows = [line.split("|") for line in lines if line]
    if name.startswith("4-step"):
        # people reaching each step → people whose deepest step is each level
        people = [int(r[1]) for r in rows]
        return [[str(i + 1), str(people[i] - (people[i + 1] if i + 1 < len(people) else 0))] for i in range(len(people)) if people[i] - (people[i + 1] if i + 1 < len(people) else 0) > 0]
    if name.startswith("7-day retention"):
        return [[r[0], r[1], r[2]] for r in rows if r[2] not in ("", "0")]
    return rows


def number(text):
    try:
        value = float(text)
        return str(int(value)) if value == int(value) else f"{value:.2f}"
    except ValueError:
        return text


def compare(name, pg_lines, ch_text):
    pg = [[number(c) for c in r] for r in canonical_pg(name, pg_lines)]
    ch = [[number(c) for c in line.split("\t")] for line in ch_text.strip().splitlines()]
    return pg == ch, pg, ch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--analyst-url", required=True)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--restart", help="a command that restarts PostgreSQL (for cold runs)")
    parser.add_argument("--out", help="write the table (Markdown) here too")
    parser.add_argument("--no-clickhouse", action="store_true")
    args = parser.parse_args()

    started = time.monotonic()
    events, people, merges = load(args.url, args.events)
    if events < args.events:
        say(f"the generator made {events} events, fewer than the {args.events} asked")
    loaded = time.monotonic() - started
    # What the collector's catalog would hold had the rows come through it (the reports check names there).
    psql(args.url, f"""
        INSERT INTO collector.report_settings (project, time_zone) VALUES ('{PROJECT}', '{ZONE}');
        INSERT INTO collector.catalog_event_sources (project, event, lib, app_version, first_day, last_day)
        SELECT DISTINCT '{PROJECT}', event, '', '', current_date, current_date FROM collector.events;
        INSERT INTO collector.catalog_properties (project, kind, name, type, first_day, last_day, sample) VALUES
            ('{PROJECT}', 'event', '$city', 'STRING', current_date, current_date, ''),
            ('{PROJECT}', 'event', 'price', 'NUMBER', current_date, current_date, '');""")
    say(f"loaded in {loaded:.0f} s; VACUUM ANALYZE")
    psql(args.url, "VACUUM ANALYZE collector.events")
    say("the collector's rollup look over everything (the first look after an upgrade)")
    t0 = time.monotonic()
    out = psql(args.url, "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT * FROM collector.report_round(1000); "
               "SELECT collector.report_people_round(1000, '0 s'); COMMIT;")
    built = time.monotonic() - t0
    psql(args.url, "VACUUM ANALYZE collector.report_days, collector.report_hours, collector.report_people_days")
    sizes = psql(args.url, """SELECT pg_size_pretty(pg_total_relation_size('collector.report_days')), (SELECT count(*) FROM collector.report_days),
        pg_size_pretty(pg_total_relation_size('collector.report_hours')), (SELECT count(*) FROM collector.report_hours),
        pg_size_pretty((SELECT sum(pg_total_relation_size(c.oid)) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                        WHERE i.inhparent IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'collector.events'::regclass)))""").strip()
    say(f"rollups built in {built:.1f} s: {out.strip()}; days, hours, events: {sizes}")

    today = (dt.datetime.now(dt.timezone.utc) + OFFSET).date()
    first, last = today - dt.timedelta(days=60), today - dt.timedelta(days=1)
    chdb = None
    if not args.no_clickhouse:
        import chdb as chdb_module
        from chdb import session as chs
        chdb = chs.Session()
        chdb.query("CREATE DATABASE IF NOT EXISTS bench")
        chdb.query("USE bench")
        chdb.query("CREATE TABLE events (time DateTime64(3, 'UTC'), event LowCardinality(String), user UInt64, lib LowCardinality(String), "
                   "city LowCardinality(String), price Float64) ENGINE = MergeTree ORDER BY (event, time)")
        t0 = time.monotonic()
        chdb.query(f"INSERT INTO events SELECT fromUnixTimestamp64Milli(ms, 'UTC'), event, user, lib, city, price FROM file('{CH_FILE}', 'TabSeparated', "
                   "'ms Int64, event String, user UInt64, lib String, city String, price Float64')")
        say(f"ClickHouse (chDB {chdb_module.__version__}) loaded the same rows in {time.monotonic() - t0:.1f} s")
    ch_special = ch_reports(first, last)
    results = []
    for name, call, ch_query in reports(first, last):
        if args.restart:
            subprocess.run(args.restart, shell=True, check=True, capture_output=True)
        lines, times = psql(args.analyst_url, "\n".join([call + ";"] * (args.runs + 1)), timing=True)
        answer = lines[: len(lines) // (args.runs + 1)]
        cold, warm = times[0], statistics.median(times[1:])
        row = {"report": name, "cold_ms": cold, "warm_ms": warm}
        ch_query = ch_query or ch_special.get(name)
        if chdb and ch_query:
            ch_times = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                ch_text = str(chdb.query(ch_query, "TabSeparated"))
                ch_times.append((time.perf_counter() - t0) * 1000)
            same, pg_rows, ch_rows = compare(name, answer, ch_text)
            row.update(clickhouse_ms=statistics.median(ch_times), same=same)
            if not same:
                print(f"   {name}: answers differ\n   PostgreSQL {pg_rows[:6]}…\n   ClickHouse {ch_rows[:6]}…")
        results.append(row)
        print(f"   {name}: cold {cold:.1f} ms, warm {warm:.1f} ms" + (f", ClickHouse {row['clickhouse_ms']:.1f} ms, same answer: {row['same']}" if "clickhouse_ms" in row else ""), flush=True)

    table = [f"{events:,} events of {people:,} people ({merges:,} merged), loaded in {loaded:.0f} s; the rollups' first look {built:.1f} s; "
             f"report_days, rows, report_hours, rows, events: {sizes.replace('|', ', ')}", "",
             "| report | cold | warm | ClickHouse (chDB) | warm / ClickHouse | same answer |", "|---|---|---|---|---|---|"]
    for row in results:
        ratio = f"{row['warm_ms'] / row['clickhouse_ms']:.1f}x" if "clickhouse_ms" in row else ""
        table.append(f"| {row['report']} | {row['cold_ms']:.0f} ms | {row['warm_ms']:.1f} ms | "
                     + (f"{row['clickhouse_ms']:.1f} ms | {ratio} | {'yes' if row['same'] else 'NO'} |" if "clickhouse_ms" in row else "| | |"))
    print("\n".join(table))
    if args.out:
        with open(args.out, "w") as handle:
            handle.write("\n".join(table) + "\n")
    if any(row.get("same") is False for row in results):
        raise SystemExit("a report's answer differs from ClickHouse's")


if __name__ == "__main__":
    main()
