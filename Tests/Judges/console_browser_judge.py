#!/usr/bin/env python3
"""Drives Debian's headless Chromium through the support console with Selenium, as an operator would.

Run by Tests/ConsoleServiceTests/ConsoleBrowserTests.swift against a live suite and console:

    console_browser_judge.py CONFIG.json

CONFIG names the console's URL, a support operator and a viewer (password, base32 TOTP secret), one customer (every id
it can be found by, and what fulfillment says its Production wallet and ledger hold), a purchase to revoke, the reason
text to type, and where to save screenshots. The script prints one JSON object: what it saw, and `failures` (empty when
every check held). Selenium runs offline: the system's /usr/bin/chromedriver and /usr/bin/chromium, headless, no
sandbox (CI runs as root), and Selenium Manager never asked for anything.
"""
import base64
import hashlib
import hmac
import json
import os
import struct
import sys
import time

os.environ["SE_OFFLINE"] = "true"  # Selenium Manager: never download a driver or a browser

import requests  # noqa: E402
from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException, WebDriverException  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

failures = []
seen = {}


def check(condition, what):
    if not condition:
        failures.append(what)
    return condition


def totp(secret_b32, offset_steps=0):
    """RFC 6238: HMAC-SHA1 over the 30-second step, 6 digits (the same as any authenticator app)."""
    key = base64.b32decode(secret_b32 + "=" * (-len(secret_b32) % 8))
    step = int(time.time() // 30) + offset_steps
    mac = hmac.new(key, struct.pack(">Q", step), hashlib.sha1).digest()
    offset = mac[-1] & 0x0F
    return "%06d" % ((struct.unpack(">I", mac[offset:offset + 4])[0] & 0x7FFFFFFF) % 1000000)


def browser():
    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for argument in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000", "--disable-gpu"]:
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)


def no_alert(driver, where):
    try:
        alert = driver.switch_to.alert
        failures.append("an alert fired on %s: %r" % (where, alert.text))
        alert.dismiss()
    except NoAlertPresentException:
        pass


def submit(driver, element):
    """Clicks a submit button (or submits a field's form) and waits until the next page has replaced this one."""
    page = driver.find_element(By.TAG_NAME, "html")
    if element.tag_name == "button":
        element.click()
    else:
        element.submit()
    WebDriverWait(driver, 15).until(replaced(page))


def replaced(page):
    """Whether `page` (the html element before a submit) has been replaced. Selenium's staleness_of only takes
    StaleElementReferenceException for that; Chromium sometimes answers a look at a node of the document being replaced
    with a generic inspector error instead (seen 2026-11-30), which means the same."""

    def check(_driver):
        try:
            page.is_enabled()
            return False
        except StaleElementReferenceException:
            return True
        except WebDriverException as error:
            if "does not belong to the document" in str(error):
                return True
            raise

    return check


def sign_in(driver, url, name, password, code):
    driver.get(url + "/sign-in")
    if not driver.find_elements(By.XPATH, "//label[contains(., 'Username')]/input"):
        raise AssertionError("no sign-in form at %s/sign-in: %s" % (url, driver.page_source[:2000]))
    driver.find_element(By.XPATH, "//label[contains(., 'Username')]/input").send_keys(name)
    driver.find_element(By.XPATH, "//label[contains(., 'Password')]/input").send_keys(password)
    driver.find_element(By.XPATH, "//label[contains(., 'Code')]/input").send_keys(code)
    submit(driver, driver.find_element(By.XPATH, "//button[normalize-space()='Sign in']"))


def text(driver, css):
    return driver.find_element(By.CSS_SELECTOR, css).text.strip()


def button(container, label):
    return container.find_element(By.XPATH, ".//button[normalize-space()='%s']" % label)


def session_cookies(driver):
    return {c["name"]: c["value"] for c in driver.get_cookies()}


def main():
    config = json.load(open(sys.argv[1]))
    url, customer, support, viewer = config["url"], config["customer"], config["support"], config["viewer"]
    shots = config["screenshots"]
    driver = browser()
    try:
        # Signing in: a wrong password and a wrong code are refused, then the right ones let the operator in.
        sign_in(driver, url, support["name"], "not the password", totp(support["totpSecret"]))
        check("Wrong username, password or code." in driver.page_source, "a wrong password was not refused")
        wrong = "%06d" % ((int(totp(support["totpSecret"])) + 500000) % 1000000)
        sign_in(driver, url, support["name"], support["password"], wrong)
        check("Wrong username, password or code." in driver.page_source, "a wrong code was not refused")
        sign_in(driver, url, support["name"], support["password"], totp(support["totpSecret"]))
        check(driver.find_element(By.TAG_NAME, "h1").text == "Overview", "the right password and code did not sign in")
        driver.save_screenshot(os.path.join(shots, "overview.png"))
        expected = config["overview"]
        # The 30 days' column: the suite's clock and the simulator's may stand on either side of midnight UTC.
        seen["overview"] = {"purchases": text(driver, "#figure-purchases .month"), "unpriced": text(driver, "#figure-unpriced .month"),
                            "revenueUSD": text(driver, "#revenue-USD .month"), "charts": len(driver.find_elements(By.CSS_SELECTOR, ".charts svg"))}
        check(all(seen["overview"][k] == v for k, v in expected.items()), "the overview's figures differ: %r" % seen["overview"])
        check(seen["overview"]["charts"] == 3, "the overview draws purchases, refunds and revenue in USD")

        cookie = driver.get_cookie("iap_console") or {}
        seen["cookie"] = {k: cookie.get(k) for k in ["httpOnly", "sameSite", "secure", "path"]}
        check(cookie.get("httpOnly") is True and cookie.get("sameSite") == "Strict", "the session cookie lacks HttpOnly or SameSite=Strict")
        check(cookie.get("secure") is False, "a plain-HTTP loopback console marked its cookie Secure (the browser would drop it)")

        # Found by every kind of id a customer can give.
        found = {}
        for kind, query in customer["ids"].items():
            driver.get(url + "/")
            box = driver.find_element(By.XPATH, "//label[contains(., 'Search')]/input")
            box.send_keys(query)
            submit(driver, box)
            found[kind] = text(driver, "#account-id") if driver.find_elements(By.CSS_SELECTOR, "#account-id") else None
            check(found[kind] == customer["accountId"], "searching by %s found %r" % (kind, found[kind]))
            no_alert(driver, "the customer page")
        seen["found"] = found

        # The page's numbers are fulfillment's: balance, debt and every ledger row.
        driver.get(url + "/customers/" + customer["accountId"])
        check(text(driver, "#username") == customer["username"], "the username is not shown as text: %r" % text(driver, "#username"))
        scope = driver.find_element(By.ID, "scope-Production")
        seen["balance"], seen["debt"] = text(driver, "#scope-Production .balance"), text(driver, "#scope-Production .debt")
        check(seen["balance"] == str(customer["balance"]) and seen["debt"] == str(customer["owed"]), "balance or debt differ from fulfillment's")
        rows = [[td.text.strip() for td in row.find_elements(By.CSS_SELECTOR, "td.kind, td.delta, td.after")]
                for row in scope.find_elements(By.CSS_SELECTOR, "tr.ledger-row")]
        seen["ledger"] = rows
        check(rows == [[r["kind"], str(r["delta"]), str(r["balance"])] for r in customer["ledger"]], "the ledger differs from fulfillment's")
        driver.save_screenshot(os.path.join(shots, "customer.png"))

        # Give 50 coins with a reason: a confirmation page, then the ledger row and the audit entry naming the operator.
        scope = driver.find_element(By.ID, "scope-Production")
        form = button(scope, "Give coins").find_element(By.XPATH, "./ancestor::form")
        form.find_element(By.NAME, "amount").send_keys("50")
        form.find_element(By.NAME, "reason").send_keys(config["reason"])
        submit(driver, button(form, "Give coins"))
        check(driver.find_element(By.TAG_NAME, "h1").text == "Confirm: Give coins", "no confirmation step before giving coins")
        no_alert(driver, "the confirmation page")
        submit(driver, button(driver, "Confirm"))
        done = driver.find_element(By.TAG_NAME, "main")
        seen["given"] = [td.text for td in done.find_elements(By.CSS_SELECTOR, "table.ledger td")]
        check(seen["given"][1:3] == ["adjustment", "50"], "the adjustment's ledger row was not shown: %r" % seen["given"])
        check(seen["given"][-1] == "support adjustment", "the customer's ledger row carries the operator's reason: %r" % seen["given"][-1])
        check(text(driver, "table.audit td.operator") == support["name"], "the audit entry does not name the operator")
        check(text(driver, "table.audit td.reason") == config["reason"], "the audit entry's reason is not the text typed")
        no_alert(driver, "the result page")

        # Revoke a purchase.
        driver.get(url + "/customers/" + customer["accountId"])
        row = driver.find_element(By.XPATH, "//table[@class='purchases']//tr[td[1][normalize-space()='%s']]" % config["revoke"])
        row.find_element(By.NAME, "reason").send_keys("chargeback " + config["reason"])
        submit(driver, button(row, "Revoke"))
        submit(driver, button(driver, "Confirm"))
        seen["revoked"] = text(driver, "#outcome")
        check(seen["revoked"] == "Purchase %s revoked." % config["revoke"], "the revocation did not happen: %r" % seen["revoked"])
        driver.get(url + "/customers/" + customer["accountId"])
        state = driver.find_element(By.XPATH, "//table[@class='purchases']//tr[td[1][normalize-space()='%s']]/td[@class='state']" % config["revoke"])
        check(state.text == "revoked", "the purchase's state after revoking: %r" % state.text)
        # Sign the customer out of every device.
        form = button(driver, "Sign out of all devices").find_element(By.XPATH, "./ancestor::form")
        form.find_element(By.NAME, "reason").send_keys("stolen phone")
        submit(driver, button(form, "Sign out of all devices"))
        submit(driver, button(driver, "Confirm"))
        seen["signedOut"] = text(driver, "#outcome")
        check(seen["signedOut"].startswith("1 session(s) ended"), "the customer was not signed out: %r" % seen["signedOut"])
        driver.get(url + "/customers/" + customer["accountId"])
        no_alert(driver, "the customer page after the actions")
        driver.save_screenshot(os.path.join(shots, "customer-after.png"))
        seen["pageAfter"] = driver.find_element(By.TAG_NAME, "main").text

        # A form posted without its CSRF token is refused, even with a live session.
        cookies = session_cookies(driver)
        forged = requests.post(url + "/customers/%s/do" % customer["accountId"], cookies=cookies, allow_redirects=False,
                               data={"action": "give-coins", "amount": "1000", "reason": "forged", "environment": "Production",
                                     "key": "6a0b6d4e-2d3c-4f55-9c55-0d5b0d6f7a11"})
        seen["withoutCSRF"] = forged.status_code
        check(forged.status_code == 403, "a POST without the CSRF token answered %d" % forged.status_code)
    finally:
        driver.quit()

    # A viewer sees no action buttons, and a POST made by hand with its own valid session and CSRF token answers 403.
    driver = browser()
    try:
        sign_in(driver, url, viewer["name"], viewer["password"], totp(viewer["totpSecret"]))
        driver.get(url + "/customers/" + customer["accountId"])
        labels = ["Give coins", "Take coins back", "Revoke", "Extend", "Retry", "Dismiss", "Sign out of all devices", "Grant order"]
        present = [b.text for b in driver.find_elements(By.TAG_NAME, "button") if b.text.strip() in labels]
        seen["viewerButtons"] = present
        check(present == [], "a viewer sees action buttons: %r" % present)
        csrf = driver.find_element(By.CSS_SELECTOR, "header input[name=csrf]").get_attribute("value")
        by_hand = requests.post(url + "/customers/%s/do" % customer["accountId"], cookies=session_cookies(driver), allow_redirects=False,
                                data={"csrf": csrf, "action": "give-coins", "amount": "1000", "reason": "viewer", "environment": "Production",
                                      "key": "0f6c1f55-9f3a-4d41-8a55-2b1f4c7d9e01"})
        seen["viewerPost"] = by_hand.status_code
        check(by_hand.status_code == 403, "a viewer's POST answered %d" % by_hand.status_code)
        operators = requests.get(url + "/operators", cookies=session_cookies(driver), allow_redirects=False)
        seen["viewerOperators"] = operators.status_code
        check(operators.status_code == 403, "a viewer reached the operators page: %d" % operators.status_code)
    finally:
        driver.quit()

    # An admin adds an operator; the password and TOTP secret it is shown once let that operator sign in.
    admin = config["admin"]
    driver = browser()
    try:
        sign_in(driver, url, admin["name"], admin["password"], totp(admin["totpSecret"]))
        # The catalog: a product's prices replaced, as `iap catalog set-price` would.
        driver.get(url + "/catalog?storefront=USA")
        row = driver.find_element(By.XPATH, "//table[@class='catalog']//tr[td[1][normalize-space()='coins.100']]")
        row.find_element(By.NAME, "prices").send_keys("USA:USD:1.29 DEU:EUR:1.19")
        submit(driver, button(row, "Set prices"))
        row = driver.find_element(By.XPATH, "//table[@class='catalog']//tr[td[1][normalize-space()='coins.100']]")
        seen["newPrice"] = row.find_element(By.CSS_SELECTOR, "td.price").text
        check(seen["newPrice"] == "1.29 USD", "the catalog page shows %r after setting 1.29 USD" % seen["newPrice"])
        driver.get(url + "/operators")
        form = button(driver, "Add operator").find_element(By.XPATH, "./ancestor::form")
        form.find_element(By.NAME, "name").send_keys("newbie")
        submit(driver, button(form, "Add operator"))
        password, secret = text(driver, "#new-password"), text(driver, "#new-secret")
        # Its role changed from viewer to support; the admin's own row has no such forms.
        row = driver.find_element(By.XPATH, "//table[@class='operators']//tr[td[1][normalize-space()='newbie']]")
        Select(row.find_element(By.NAME, "role")).select_by_visible_text("support")
        submit(driver, button(row, "Change role"))
        own = driver.find_element(By.XPATH, "//table[@class='operators']//tr[td[1][normalize-space()='%s']]" % admin["name"])
        check(own.find_elements(By.TAG_NAME, "button") == [], "an admin is offered to remove or demote themselves")
        submit(driver, button(driver, "Sign out"))
        sign_in(driver, url, "newbie", password, totp(secret))
        seen["newOperator"] = driver.find_element(By.TAG_NAME, "h1").text
        check(seen["newOperator"] == "Overview", "the new operator could not sign in with what the page showed")
        check(text(driver, "header .who") == "newbie (support)", "the new operator's role is not the one the admin set")
    finally:
        driver.quit()

    print(json.dumps({"seen": seen, "failures": failures}))


if __name__ == "__main__":
    main()
