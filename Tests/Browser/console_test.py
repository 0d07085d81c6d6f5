"""The console, driven in Chromium the way an operator uses it (scripts/browser-test runs this).

Each step waits for what a person would see, fails with what it saw instead, and saves a
screenshot of the page it checked.
"""
import argparse
import base64
import json
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

PROJECT = "shop_app"
DISTINCT_ID = "browser-device-1"
# With a space: the console must send it as %20, which every service reads as a space (a "+" is a plus).
OTHER_ID = "browser device 2"


class Console:
    def __init__(self, url, shots):
        options = webdriver.ChromeOptions()
        for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1440,1000", "--lang=en-US"):
            options.add_argument(flag)
        self.driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path="/usr/bin/chromedriver"), options=options)
        self.url = url
        self.shots = shots
        self.step = 0

    def wait(self, condition, what, timeout=15):
        try:
            # A view re-renders after each change: an element found just before is stale, and is
            # looked for again.
            return WebDriverWait(self.driver, timeout, ignored_exceptions=[StaleElementReferenceException]).until(condition)
        except TimeoutException:
            self.shot("failed")
            body = self.driver.find_element(By.TAG_NAME, "body").text[:1500]
            raise AssertionError(f"waited {timeout} s for {what}; the page shows:\n{body}") from None

    def find(self, css, timeout=15):
        return self.wait(EC.visibility_of_element_located((By.CSS_SELECTOR, css)), f"an element '{css}'", timeout)

    def text_in(self, css, text, timeout=15):
        return self.wait(EC.text_to_be_present_in_element((By.CSS_SELECTOR, css), text), f"'{text}' in '{css}'", timeout)

    def click(self, css):
        for attempt in range(3):
            element = self.find(css)
            try:
                self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
                element.click()
                return element
            except StaleElementReferenceException:
                if attempt == 2:
                    raise

    def button(self, label, within="body"):
        xpath = f"//{'*' if within == 'body' else within}//button[normalize-space()='{label}']"
        for attempt in range(3):
            element = self.wait(EC.element_to_be_clickable((By.XPATH, xpath)), f"a button '{label}'")
            try:
                self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
                element.click()
                return
            except StaleElementReferenceException:
                if attempt == 2:
                    raise

    def type(self, element, text):
        element.clear()
        element.send_keys(text)

    def accept_confirm(self):
        alert = self.wait(EC.alert_is_present(), "a confirmation dialog")
        alert.accept()

    def shot(self, name):
        self.step += 1
        self.driver.save_screenshot(f"{self.shots}/{self.step:02d}-{name}.png")

    def errors(self):
        """JavaScript errors the page logged (a console that throws is broken even if it looks fine)."""
        # Network entries are the API's 4xx answers, which the steps above ask for on purpose.
        return [e for e in self.driver.get_log("browser") if e.get("level") == "SEVERE" and e.get("source") != "network"]


def upload(gateway, token, records):
    """What an SDK sends: form-encoded data_list, base64 JSON, gzip=0."""
    data = base64.b64encode(json.dumps(records).encode()).decode()
    body = urllib.parse.urlencode({"data_list": data, "gzip": "0"}).encode()
    url = f"{gateway}/sa?project={PROJECT}&token={urllib.parse.quote(token)}"
    for _ in range(20):
        try:
            with urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST"), timeout=10) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            # The gateway learns a new project's token within a few seconds (403/404 until then).
            if error.code in (403, 404):
                time.sleep(0.5)
                continue
            raise AssertionError(f"the gateway answered {error.code}: {error.read()[:300]!r}") from None
    raise AssertionError("the gateway kept refusing the project's new token")


def identity_call(args, method, path, body=None):
    """identity-service's own API (service token): what the test sets up behind the console's back."""
    request = urllib.request.Request(
        f"{args.identity}/v1/projects/{PROJECT}{path}", method=method, data=json.dumps(body).encode() if body else None,
        headers={"Authorization": f"Bearer {args.service_token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def identity_user(args, device):
    query = urllib.parse.urlencode({"key": "$identity_anonymous_id", "value": device}, quote_via=urllib.parse.quote)
    return identity_call(args, "GET", f"/identities?{query}")["userId"]


def run(args):
    c = Console(args.console, args.screenshots)
    d = c.driver
    try:
        # 1. A wrong token is refused with a message; the right one signs in.
        d.get(args.console)
        c.type(c.find("#token"), "not-the-admin-token")
        c.button("Sign in")
        c.text_in(".signin .notice.error", "not valid")
        assert "not-the-admin-token" not in d.current_url, "the token must never appear in the URL"
        c.shot("sign-in-refused")
        c.type(c.find("#token"), args.admin_token)
        c.button("Sign in")
        c.text_in("main h1", "Projects")
        assert args.admin_token not in d.current_url
        assert d.execute_script("return sessionStorage.getItem('datong.adminToken')") == args.admin_token
        assert d.execute_script("return localStorage.length") == 0, "nothing is kept beyond the tab"

        # 2. Create a project and give it an ingestion token, shown once.
        c.type(c.find("#new-project"), PROJECT)
        c.button("Create")
        c.text_in(".status .notice.ok", f"Project '{PROJECT}' is ready")
        c.find(f"tr[data-project='{PROJECT}']")
        c.click(f"tr[data-project='{PROJECT}'] button")
        c.accept_confirm()
        token = c.find("input.token-once").get_attribute("value")
        assert len(token) == 64, f"expected a 64-hex-digit token, got {token!r}"
        c.shot("projects-token-shown-once")
        # The reports' time zone: a zone PostgreSQL knows is kept, one it does not is refused with why.
        zone = c.find(f"tr[data-project='{PROJECT}'] input.time-zone")
        c.wait(lambda _: zone.get_attribute("value") == "UTC", "the project's zone shows UTC", 15)
        c.type(zone, "Asia/Shanghai")
        c.click(f"tr[data-project='{PROJECT}'] .time-zone-form button")
        c.text_in(".status .notice.ok", "Asia/Shanghai")
        c.type(zone, "Mars/Olympus")
        c.click(f"tr[data-project='{PROJECT}'] .time-zone-form button")
        c.text_in(".status .notice", "Mars/Olympus")
        c.type(zone, "Asia/Shanghai")

        # 3. A tracking table with one mistake: the message appears at the field.
        d.get(f"{args.console}#/p/{PROJECT}/tracking")
        c.text_in("main h1", "Tracking table")
        c.button("+ Add ACTION entry")
        c.type(c.find("[data-section='ACTION'] input.identifier"), "ViewController")  # no selector: not an ACTION identifier
        c.button("+ value")
        c.type(c.find("[data-section='ACTION'] input[aria-label='Property name']"), "page_type")
        c.type(c.find("[data-section='ACTION'] input[aria-label='Property value']"), "cart")
        c.button("+ parameter")
        c.type(c.find("[data-section='ACTION'] input[aria-label='Upload key']"), "product_id")
        c.type(c.find("[data-section='ACTION'] input[aria-label='propertyName']"), "productId")
        identifier = c.find("[data-section='ACTION'] input.identifier")
        assert identifier.get_attribute("value") == "ViewController", "adding rows keeps what was typed"
        c.click("#publish")
        c.text_in(".status .notice.error", "1 problem")
        message = c.find("[data-section='ACTION'] input.identifier + .field-error").text
        assert "not a ACTION identifier" in message, f"the problem is shown at the identifier: {message!r}"
        assert identifier.get_attribute("aria-invalid") == "true"
        c.shot("tracking-table-problem-at-field")

        c.type(identifier, "ViewController/addToCart:")
        c.click("#publish")
        c.text_in(".status .notice.ok", "Published as version 1")
        assert not d.find_elements(By.CSS_SELECTOR, ".field-error"), "the fixed table shows no problem"

        value = c.find("[data-section='ACTION'] input[aria-label='Property value']")
        c.type(value, "checkout")
        c.click("#publish")
        c.text_in(".status .notice.ok", "Published as version 2")

        # 4. Diff the two versions side by side, then roll back to the first.
        Select(c.find("#diff-from")).select_by_visible_text("v1")
        Select(c.find("#diff-to")).select_by_visible_text("v2")
        c.button("Show diff")
        c.text_in(".diff-area h3", "1 change(s)")
        c.text_in(".diff-area ul.changes", "/ACTION/ViewController~1addToCart:/userDefined/page_type")
        assert '"cart"' in c.find(".side-by-side td.del").text
        assert '"checkout"' in c.find(".side-by-side td.ins").text
        d.execute_script("document.querySelector('.diff-area').scrollIntoView()")
        c.shot("tracking-table-diff")
        c.button("Roll back to v1")
        c.accept_confirm()
        c.text_in(".history .notice.ok", "version 1 is published again as version 3")
        assert c.find("[data-section='ACTION'] input[aria-label='Property value']").get_attribute("value") == "cart"

        # 5. Another kind through the JSON editor: validate, publish.
        d.get(f"{args.console}#/p/{PROJECT}/documents/h5-domain-whitelist")
        c.text_in("main h1", "H5 domain whitelist")
        editor = c.find("#document-json")
        c.type(editor, '{"domains": ["m.example.com"]}')
        c.button("Validate")
        c.text_in("main .status ul.problems", "JSON array of strings")
        c.type(editor, '["m.example.com", "*.shop.example.com"]')
        c.button("Validate")
        c.text_in("main .status .notice.ok", "The document is valid")
        c.button("Publish")
        c.text_in("main .status .notice", "version")
        c.shot("documents-whitelist")

        # 6. A good event and a bad record through the gateway appear in the live view.
        now = int(time.time() * 1000)
        status_code, answer = upload(args.gateway, token, [
            {"type": "track", "event": "AddToCart", "time": now, "distinct_id": DISTINCT_ID, "_track_id": 1,
             "lib": {"$lib": "iOS", "$lib_version": "4.8.0", "$lib_method": "code"},
             "properties": {"$app_version": "2.3.0", "product_id": "sku-42", "price": 19.9}},
            {"type": "track", "event": "AddToCart", "time": now, "_track_id": 2, "properties": {"price": 1}},
        ])
        assert status_code == 200, (status_code, answer)
        d.get(f"{args.console}#/p/{PROJECT}/live")
        c.text_in("main h1", "Live data")
        c.find(f"tr.event-row[data-distinct-id='{DISTINCT_ID}']", timeout=20)
        c.button("details")
        c.text_in("tr.event-detail", "sku-42")
        c.text_in("tr.event-detail", "iOS 4.8.0")
        # The address the gateway added: this test's connection, from loopback (no region for it).
        c.text_in("tr.event-detail dl", "127.0.0.1")
        reason = c.find(".rejected-table td.reason", timeout=20).text
        assert "distinct_id" in reason, f"the rejected record's reason names what was wrong: {reason!r}"
        c.find(".chart svg polyline.received")
        # The services config-service knows (the gateway through its GATEWAY_URL), ready, each
        # with its release and the collector's figures.
        c.text_in(".services-table tr[data-service='collector'] td.ready", "yes")
        c.text_in(".services-table tr[data-service='collector']", "months of partitions ahead")
        c.text_in(".services-table tr[data-service='identity-service'] td.ready", "yes")
        c.text_in(".services-table tr[data-service='bridge-gateway'] td.ready", "yes")
        c.text_in(".services-table tr[data-service='bridge-gateway']", "identity cache refreshed")
        version = c.find(".services-table tr[data-service='identity-service'] td.version").text
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"the release each service runs: {version!r}"
        c.shot("live-data")
        d.execute_script("arguments[0].scrollIntoView()", c.find(".services-table"))
        c.shot("live-services")

        # 7. The user behind the distinct id.
        d.get(f"{args.console}#/p/{PROJECT}/identity")
        c.text_in("main h1", "Identity")
        c.type(c.find("#lookup-value"), DISTINCT_ID)
        c.button("Look up")
        c.text_in(".result h2", "User ")
        c.text_in(".result table.identities", DISTINCT_ID)

        # A wrong merge (another device's user merged into this one), undone from the console.
        upload(args.gateway, token, [{"type": "track", "event": "AppStart", "time": now, "distinct_id": OTHER_ID, "_track_id": 3, "properties": {}}])
        mine, other = identity_user(args, DISTINCT_ID), identity_user(args, OTHER_ID)
        identity_call(args, "POST", "/merges", {"fromUser": other, "intoUser": mine, "actor": "browser-test"})
        c.button("Look up")
        c.text_in(".result table.merges", f"{other} → {mine}")
        c.text_in(".result table.identities", OTHER_ID)
        c.shot("identity-lookup")
        c.button("Undo merge")
        c.accept_confirm()
        c.text_in(".result .notice.ok", "is undone")
        c.text_in(".result table.merges", "undone")
        identities = c.find(".result table.identities").text
        assert OTHER_ID not in identities, f"the other device went back to its user: {identities}"
        # An id with spaces is found: the console writes its query as RFC 3986 (%20), not as a form ("+").
        c.type(c.find("#lookup-value"), OTHER_ID)
        c.button("Look up")
        c.text_in(".result h2", f"User {other}")
        c.text_in(".result table.identities", OTHER_ID)

        # 8. A user's data on request: what is held about the other device's user, its erasure, the
        # suppression that keeps its retried records out.
        d.get(f"{args.console}#/p/{PROJECT}/privacy")
        c.text_in("main h1", "Privacy")
        # Named by the distinct_id analytics.events shows, whatever kind of id it is.
        Select(c.find("#privacy-key")).select_by_visible_text("distinct_id (any id)")
        c.type(c.find("#privacy-value"), OTHER_ID)
        c.button("Show what is held")
        c.text_in("#privacy-held h2", f"What is held about distinct_id {OTHER_ID}")
        held = c.find("#privacy-held table.held tr[data-table='events']").text
        assert held.endswith("1"), f"the other device's one event is held: {held!r}"
        c.shot("privacy-what-is-held")
        c.button("Erase this user…")
        c.accept_confirm()
        c.text_in("#privacy-held .notice.ok", "Erasure 1 started")
        c.find("table.erasures tr[data-erasure='1'][data-state='done']", timeout=30)
        c.text_in("table.erasures", "1 events")
        c.text_in("table.suppressions", OTHER_ID)
        c.shot("privacy-erased-and-suppressed")
        status_code, answer = upload(args.gateway, token, [
            {"type": "track", "event": "AppStart", "time": now, "distinct_id": OTHER_ID, "_track_id": 3, "properties": {}}])
        assert status_code == 200 and answer.get("suppressed") == 1 and answer.get("stored") == 0, answer
        c.button("Show what is held")
        c.text_in("#privacy-held .notice.info", "Records refused under an id are found by its kind")
        Select(c.find("#privacy-key")).select_by_visible_text("anonymous id")
        c.button("Show what is held")
        c.text_in("#privacy-held .notice.info", "No user of project")
        c.text_in("#privacy-held .notice.info", "no refused record names it either")
        # What the gateways add: the address truncated and crawlers marked, saved, and read back
        # after a reload (the page shows what config-service holds).
        Select(c.find("#enrichment-ip")).select_by_value("truncated")
        Select(c.find("#enrichment-bots")).select_by_value("mark")
        c.button("Save")
        c.text_in("#enrichment-note .notice.ok", "Saved")
        d.refresh()
        c.text_in("main h1", "Privacy")
        c.wait(lambda driver: Select(driver.find_element(By.CSS_SELECTOR, "#enrichment-ip")).first_selected_option.get_attribute("value")
               == "truncated", "the saved $ip setting shown after a reload")
        assert Select(c.find("#enrichment-bots")).first_selected_option.get_attribute("value") == "mark"
        c.shot("privacy-enrichment")

        # 9. The audit trail names every change made above.
        d.get(f"{args.console}#/audit")
        c.text_in("main h1", "Audit trail")
        audit = c.find("table.audit").text
        for action in ("project.created", "project.token_set", "document.published", "document.rolled_back",
                       "user.exported", "user.erasure_requested", "user.erased", "project.enrichment_set"):
            assert action in audit, f"{action} is in the audit trail"
        c.shot("audit-trail")

        # 10. Reports: four shoppers over two days walk a funnel as far as each gets (shopper n does
        # the first 4 - n steps each day); each report is drawn from the URL or the form, its query
        # kept in the URL, its rows downloadable as CSV.
        now_ms = int(time.time() * 1000)
        steps = ["$AppStart", "ViewProduct", "AddToCart", "Pay"]
        traffic, track = [], 1000
        for n in range(4):
            for day in (1, 0):
                at = now_ms - day * 86_400_000 - 3_600_000
                for k, event in enumerate(steps[:4 - n]):
                    track += 1
                    properties = {"product_id": f"sku-{k}", "price": 10 * (k + 1)} if event in ("AddToCart", "Pay") else {}
                    traffic.append({"type": "track", "event": event, "time": at + k * 60_000, "distinct_id": f"shopper-{n}", "_track_id": track,
                                    "lib": {"$lib": "js" if n % 2 == 0 else "iOS", "$lib_version": "1.27.10"}, "properties": properties})
        status_code, answer = upload(args.gateway, token, traffic)
        assert status_code == 200 and answer.get("stored") == len(traffic), answer
        day = lambda offset: time.strftime("%Y-%m-%d", time.gmtime(now_ms / 1000 + offset * 86400))
        days = f"from_day={day(-3)}&to_day={day(1)}"

        def rerun_until(css, text, what):
            """The trend reads rollups the collector brings up to date every 2 s: run it again until they have."""
            deadline = time.time() + 20
            while time.time() < deadline:
                try:
                    if text in d.find_element(By.CSS_SELECTOR, css).get_attribute("textContent"):
                        return
                except WebDriverException:
                    pass
                c.button("Run report")
                time.sleep(1)
            c.text_in(css, text, 1)

        d.get(f"{args.console}#/p/{PROJECT}/reports/trend?events=AddToCart,Pay&{days}&unit=day")
        c.text_in("main h1", "Reports")
        rerun_until(".report-table", "Pay", "the trend's rows")
        assert len(d.find_elements(By.CSS_SELECTOR, "figure.trend-chart svg polyline")) == 2, "a line for each event"
        csv = urllib.parse.unquote(c.find("a.csv").get_attribute("href").split(",", 1)[1])
        lines = csv.split("\r\n")
        assert lines[0] == "bucket,event,group_value,value", lines
        # Each day: Pay by shopper 0, AddToCart by shoppers 0 and 1 (and step 6's one AddToCart).
        rows = [line.split(",") for line in lines[1:]]
        assert sorted(r[3] for r in rows if r[1] == "Pay") == ["1", "1"], csv
        assert sum(int(r[3]) for r in rows if r[1] == "AddToCart") == 5, csv
        assert c.find("a.csv").get_attribute("download").startswith(f"{PROJECT}-trend-")
        c.text_in("figure.trend-chart .legend", "AddToCart")
        c.shot("reports-trend")

        # The funnel from the form: its query goes into the URL.
        c.click("nav.tabs a[href$='/reports/funnel']")
        c.text_in("main .tabs a[aria-current='page']", "Funnel")
        c.type(c.find("#report-steps"), "\n".join(steps))
        for name, value in (("#report-from-day", day(-3)), ("#report-to-day", day(1))):
            d.execute_script("arguments[0].value = arguments[1]", c.find(name), value)
        c.button("Run report")
        c.wait(lambda d: "steps=" in d.current_url, "the funnel's query in the URL")
        c.text_in(".funnel-step[data-step='4']", "1 people · 25.0%")
        for n, figure in ((1, "4 people · 100.0%"), (2, "3 people · 75.0%"), (3, "2 people · 50.0%")):
            c.text_in(f".funnel-step[data-step='{n}']", figure)
        c.text_in(".funnel-step[data-step='2']", "median 1 min from step 1")
        widths = [d.execute_script("return arguments[0].getBoundingClientRect().width", bar)
                  for bar in d.find_elements(By.CSS_SELECTOR, ".funnel-bar > span")]
        assert widths[0] > 0 and [round(w / widths[0], 2) for w in widths] == [1.0, 0.75, 0.5, 0.25], widths
        c.shot("reports-funnel")
        shared = d.current_url
        d.get(f"{args.console}#/projects")
        c.text_in("main h1", "Projects")
        d.get(shared)
        c.text_in(".funnel-step[data-step='3']", "2 people · 50.0%")

        # Retention: yesterday's cohort of four all came back today; today's next day has not ended.
        d.get(f"{args.console}#/p/{PROJECT}/reports/retention?start_event=$AppStart&return_event=$AppStart&{days}&periods=2")
        c.text_in("table.retention-table tbody", "100.0%")
        cells = [td.text for td in d.find_elements(By.CSS_SELECTOR, "table.retention-table tbody tr:first-child td")]
        assert cells[1:3] == ["4", "100.0%"], cells
        assert d.find_elements(By.CSS_SELECTOR, "table.retention-table td.pending"), "periods not ended are left blank"
        Select(c.find("#retention-mode")).select_by_value("returned_within")
        c.text_in("table.retention-table tbody", "100.0%")
        c.shot("reports-retention")

        # Distribution: three shoppers viewed a product once a day (twice in all).
        d.get(f"{args.console}#/p/{PROJECT}/reports/distribution?event=ViewProduct&{days}&buckets=1,2,3")
        c.find("figure.histogram")
        csv = urllib.parse.unquote(c.find("a.csv").get_attribute("href").split(",", 1)[1])
        assert "2,3,3" in csv.split("\r\n"), csv
        c.shot("reports-distribution")

        # A person's events, newest first, page by page.
        shopper = identity_user(args, "shopper-1")
        d.get(f"{args.console}#/p/{PROJECT}/reports/user?user_id={shopper}&page_size=4")
        c.text_in("ol.timeline-list", "AddToCart")
        assert len(d.find_elements(By.CSS_SELECTOR, "ol.timeline-list li")) == 4
        assert [li.get_attribute("data-event") for li in d.find_elements(By.CSS_SELECTOR, "ol.timeline-list li")] == \
            ["AddToCart", "ViewProduct", "$AppStart", "AddToCart"]
        c.shot("reports-user")
        c.button("Older events")
        c.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, "ol.timeline-list li")) == 2, "the older page of two events")
        assert "before=" in d.current_url

        # A refused report says why.
        d.get(f"{args.console}#/p/{PROJECT}/reports/retention?start_event=$AppStart&return_event=$AppStart&{days}&periods=31")
        c.text_in(".report-result .notice.error", "periods 31: 1 to 30")

        # 11. The metadata: the events and properties the catalog kept, with their types. A price
        # sent as text after it was sent as a number refuses its record; the team previews and sets
        # the type to STRING, and replays the record.
        status_code, answer = upload(args.gateway, token, [
            {"type": "track", "event": "AddToCart", "time": now, "distinct_id": DISTINCT_ID, "_track_id": 4,
             "lib": {"$lib": "js", "$lib_version": "1.27.10"}, "properties": {"product_id": "sku-43", "price": "19.90"}},
            {"type": "track", "event": "AddToCart", "time": now, "distinct_id": DISTINCT_ID, "_track_id": 5,
             "lib": {"$lib": "js", "$lib_version": "1.27.10"}, "properties": {"product_id": "sku-44", "price": 5}}])
        assert status_code == 200 and answer.get("stored") == 1 and answer.get("rejected") == 1, answer
        d.get(f"{args.console}#/p/{PROJECT}/metadata")
        c.text_in("main h1", "Metadata")
        c.text_in("table.events-catalog tr[data-event='AddToCart']", "iOS, js")
        c.text_in("table.properties-catalog tr[data-property='price']", "NUMBER")
        c.text_in("table.refusals-table tr[data-property='price']", "NUMBER")
        c.text_in("table.refusals-table tr[data-property='price']", "STRING")
        c.text_in("table.properties-catalog tr[data-property='product_id']", "STRING")
        c.shot("metadata")
        Select(c.find("#type-property")).select_by_value("event:price")
        Select(c.find("#type-choice")).select_by_value("STRING")
        c.button("Preview")
        c.text_in(".type-status .notice.info", "price is NUMBER; as STRING:")
        c.text_in(".type-status .notice.info", "stored rows carry it, 0 of them do not read as STRING")
        c.button("Set price to STRING")
        c.accept_confirm()
        c.text_in(".type-status .notice.ok", "price is STRING now (was NUMBER)")
        c.button("Replay refused records…")
        c.accept_confirm()
        c.text_in("main .notice.ok", "1 records replayed: 1 stored, 0 stored before, 0 refused again")
        c.text_in(".type-refusals", "No record was refused")
        c.text_in("table.properties-catalog tr[data-property='price']", "STRING")
        c.text_in("table.conflicts-table tr[data-property='price']", "NUMBER")
        c.text_in("table.conflicts-table tr[data-property='price']", "AddToCart")
        c.shot("metadata-types")
        # Strict validation, from what was seen: a property nobody declared is left out and counted.
        c.button("Declare everything seen…")
        c.accept_confirm()
        c.text_in(".rules-status .notice.ok", "events and")
        Select(c.find("#strict-choice")).select_by_value("on")
        c.button("Save rules")
        c.accept_confirm()
        c.text_in(".rules-status .notice.ok", "Saved: strict on")
        c.text_in(".rules-now", "Strict: only declared events and properties are stored.")
        status_code, answer = upload(args.gateway, token, [
            {"type": "track", "event": "AddToCart", "time": now, "distinct_id": DISTINCT_ID, "_track_id": 6,
             "lib": {"$lib": "js", "$lib_version": "1.27.10"}, "properties": {"product_id": "sku-45", "price": "4", "gift_wrap": True}},
            {"type": "track", "event": "Checkout", "time": now, "distinct_id": DISTINCT_ID, "_track_id": 7,
             "lib": {"$lib": "js", "$lib_version": "1.27.10"}, "properties": {}}])
        assert status_code == 200 and answer.get("stored") == 1 and answer.get("rejected") == 1, answer
        c.button("Refresh")
        c.text_in("table.drops-table tr[data-property='gift_wrap']", "not declared")
        c.text_in("table.undeclared-table tr[data-event='Checkout']", "Checkout")
        # Hidden from analysts, and shown again.
        c.click("table.properties-catalog tr[data-property='product_id'] button[data-hide='product_id']")
        c.text_in("table.properties-catalog tr[data-property='product_id']", "hidden from analysts")
        c.shot("metadata-strict")
        # The refused event, declared, replays.
        c.click("table.undeclared-table tr[data-event='Checkout'] button[data-declare='Checkout']")
        c.text_in(".rules-status .notice.ok", "1 events and 0 properties declared")
        c.button("Replay refused records…")
        c.accept_confirm()
        c.wait(lambda d: "Checkout" not in d.find_element(By.CSS_SELECTOR, ".undeclared-events").text, "Checkout replayed and stored")
        c.text_in("table.events-catalog tr[data-event='Checkout']", "Checkout")
        c.click("table.properties-catalog tr[data-property='product_id'] button[data-hide='product_id']")
        c.wait(lambda d: "hidden from analysts" not in d.find_element(By.CSS_SELECTOR, "table.properties-catalog tr[data-property='product_id']").text,
               "product_id shown to analysts again")

        # 12. A token revoked while the tab is open sends the operator back to sign in, saying why.
        d.execute_script("sessionStorage.setItem('datong.adminToken', 'revoked-token')")
        d.get(f"{args.console}#/projects")
        c.text_in(".signin", "Sign in")
        c.text_in(".signin .notice.error", "refused")

        errors = c.errors()
        assert not errors, f"the page logged JavaScript errors: {errors}"
        print(f"console: all steps passed; {c.step} screenshots in {args.screenshots}")
    finally:
        d.quit()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--console", required=True)
    parser.add_argument("--gateway", required=True)
    parser.add_argument("--admin-token", required=True)
    parser.add_argument("--identity", required=True)
    parser.add_argument("--service-token", required=True)
    parser.add_argument("--screenshots", required=True)
    try:
        run(parser.parse_args())
    except (AssertionError, WebDriverException) as error:
        print(f"console test FAILED: {error}", file=sys.stderr)
        sys.exit(1)
