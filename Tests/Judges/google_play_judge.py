#!/usr/bin/env python3
"""Google's own client libraries judging the Google Play simulator (play-sim).

A judge nobody here wrote: google-auth's service-account credentials get an access token from the simulator's
token endpoint with the key file it issues; google-api-python-client's androidpublisher v3 client (its discovery
document ships in the package, so this runs offline) calls every Developer API method the simulator claims; and
google-auth's OIDC verifier checks the token on every real-time developer notification the simulator pushes,
against the simulator's certificates (the PEM map and the JWK set).

    python google_play_judge.py --sim 127.0.0.1:7106 --api http://127.0.0.1:7190 --package com.example.game

Prints one line per check and a last line `play-judge: N checks, M failures`; exits 1 on any failure.
"""
import argparse
import base64
import http.server
import json
import sys
import threading
import time

import google.auth.transport.requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth.exceptions import RefreshError
from google.oauth2 import id_token, service_account
from googleapiclient.discovery import build
from googleapiclient.errors import HttpError

from judge_common import Simulator, attempt, check, results

SCOPE = "https://www.googleapis.com/auth/androidpublisher"
class Receiver(http.server.ThreadingHTTPServer):
    """The push endpoint: records each push's body and bearer token; answers 500 to the first `fail_first` pushes."""

    def __init__(self, fail_first=0):
        self.pushes = []
        self.failed = 0
        self.fail_first = fail_first
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), ReceiverHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}/rtdn"


class ReceiverHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with self.server.lock:
            if self.server.failed < self.server.fail_first:
                self.server.failed += 1
                status = 500
            else:
                self.server.pushes.append((json.loads(body), self.headers.get("Authorization", "")))
                status = 204
        self.send_response(status)
        self.end_headers()

    def log_message(self, *args):
        pass


def http_error(call):
    """(status, reason) of the HttpError a call raises, or (None, None)."""
    try:
        call()
        return None, None
    except HttpError as error:
        reasons = [d.get("reason") for d in (error.error_details or []) if isinstance(d, dict)]
        return error.resp.status, (reasons[0] if reasons else None)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sim", required=True)
    parser.add_argument("--api", required=True)
    parser.add_argument("--package", default="com.example.game")
    args = parser.parse_args()
    sim = Simulator(args.sim)
    pkg = args.package
    receiver = Receiver(fail_first=2)
    sim("play.setPushEndpoint", url=receiver.url)

    # --- OAuth: the key file the simulator issues, as google-auth reads it ---------------------------------------
    key = json.loads(sim("play.serviceAccountKey")["keyFile"])
    check("key file: Google's fields", all(k in key for k in (
        "type", "project_id", "private_key_id", "private_key", "client_email", "client_id", "token_uri")) and key["type"] == "service_account"
        and key["private_key"].startswith("-----BEGIN PRIVATE KEY-----") and len(key["private_key_id"]) == 40, str(key.keys()))
    credentials = service_account.Credentials.from_service_account_info(key, scopes=[SCOPE])
    request = google.auth.transport.requests.Request()
    attempt("token: google-auth's JWT-bearer grant", lambda: credentials.refresh(request))
    check("token: an access token that expires", credentials.token and credentials.expiry is not None, str(credentials.expiry))

    forged = dict(key)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged["private_key"] = other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    try:
        service_account.Credentials.from_service_account_info(forged, scopes=[SCOPE]).refresh(request)
        check("token: a key not issued is refused (invalid_grant)", False, "accepted")
    except RefreshError as error:
        check("token: a key not issued is refused (invalid_grant)", "invalid_grant" in str(error), str(error))
    try:
        service_account.Credentials.from_service_account_info(key, scopes=["https://www.googleapis.com/auth/cloud-platform"]).refresh(request)
        check("token: another scope is refused (invalid_scope)", False, "accepted")
    except RefreshError as error:
        check("token: another scope is refused (invalid_scope)", "invalid_scope" in str(error), str(error))

    api = build("androidpublisher", "v3", credentials=credentials, static_discovery=True,
                client_options={"api_endpoint": args.api.rstrip("/") + "/"}, cache_discovery=False)
    purchases = api.purchases()

    # --- one-time products ----------------------------------------------------------------------------------
    bought = sim("play.purchase", packageName=pkg, productId="coins.100", obfuscatedExternalAccountId="acct-1", quantity=2)
    token = bought["purchaseToken"]
    p = attempt("products.get", lambda: purchases.products().get(packageName=pkg, productId="coins.100", token=token).execute())
    if p:
        check("products.get: Google's fields and states", p["purchaseState"] == 0 and p["acknowledgementState"] == 0
              and p["consumptionState"] == 0 and p["orderId"] == bought["orderIds"][0] and p["quantity"] == 2
              and p["obfuscatedExternalAccountId"] == "acct-1" and isinstance(p["purchaseTimeMillis"], str)
              and p["kind"] == "androidpublisher#productPurchase", json.dumps(p))
    v2 = attempt("productsv2.getproductpurchasev2",
                 lambda: purchases.productsv2().getproductpurchasev2(packageName=pkg, token=token).execute())
    if v2:
        item = v2["productLineItem"][0]
        check("productsv2: purchased, pending acknowledgement, its line item", v2["purchaseStateContext"]["purchaseState"] == "PURCHASED"
              and v2["acknowledgementState"] == "ACKNOWLEDGEMENT_STATE_PENDING" and item["productId"] == "coins.100"
              and item["productOfferDetails"]["quantity"] == 2 and "testPurchaseContext" not in v2, json.dumps(v2))
    attempt("products.acknowledge", lambda: purchases.products().acknowledge(
        packageName=pkg, productId="coins.100", token=token, body={"developerPayload": "granted"}).execute())
    p = purchases.products().get(packageName=pkg, productId="coins.100", token=token).execute()
    check("products.acknowledge: acknowledged, payload kept", p["acknowledgementState"] == 1 and p.get("developerPayload") == "granted")
    attempt("products.consume", lambda: purchases.products().consume(packageName=pkg, productId="coins.100", token=token).execute())
    p = purchases.products().get(packageName=pkg, productId="coins.100", token=token).execute()
    check("products.consume: consumed", p["consumptionState"] == 1)

    status, reason = http_error(lambda: purchases.products().get(packageName="com.other.app", productId="coins.100", token=token).execute())
    check("another package's token: 400 purchaseTokenDoesNotMatchPackageName", status == 400
          and reason == "purchaseTokenDoesNotMatchPackageName", f"{status} {reason}")
    status, reason = http_error(lambda: purchases.products().get(packageName=pkg, productId="coins.100", token="nope." + token).execute())
    check("an unknown token: 404 purchaseTokenNotFound", status == 404 and reason == "purchaseTokenNotFound", f"{status} {reason}")
    anonymous = build("androidpublisher", "v3", developerKey="not-a-token", static_discovery=True,
                      client_options={"api_endpoint": args.api.rstrip("/") + "/"}, cache_discovery=False)
    status, _ = http_error(lambda: anonymous.purchases().products().get(packageName=pkg, productId="coins.100", token=token).execute())
    check("no access token: 401", status == 401, str(status))

    # --- subscriptions --------------------------------------------------------------------------------------
    sub = sim("play.purchase", packageName=pkg, productId="premium", basePlanId="monthly", obfuscatedExternalAccountId="acct-1")
    stoken = sub["purchaseToken"]
    s = attempt("subscriptionsv2.get", lambda: purchases.subscriptionsv2().get(packageName=pkg, token=stoken).execute())
    if s:
        line = s["lineItems"][0]
        check("subscriptionsv2.get: active, renewing, Google's fields", s["subscriptionState"] == "SUBSCRIPTION_STATE_ACTIVE"
              and s["acknowledgementState"] == "ACKNOWLEDGEMENT_STATE_PENDING" and line["productId"] == "premium"
              and line["offerDetails"]["basePlanId"] == "monthly" and line["autoRenewingPlan"]["autoRenewEnabled"] is True
              and line["latestSuccessfulOrderId"] == sub["orderIds"][0] and line["expiryTime"].endswith("Z")
              and s["externalAccountIdentifiers"]["obfuscatedExternalAccountId"] == "acct-1", json.dumps(s))
    attempt("subscriptions.acknowledge", lambda: purchases.subscriptions().acknowledge(
        packageName=pkg, subscriptionId="premium", token=stoken, body={}).execute())
    first_expiry = purchases.subscriptionsv2().get(packageName=pkg, token=stoken).execute()["lineItems"][0]["expiryTime"]
    sim("play.advanceClock", seconds=30 * 86400 + 1)
    s = purchases.subscriptionsv2().get(packageName=pkg, token=stoken).execute()
    check("renewed: acknowledged, new order ..0, later expiry", s["acknowledgementState"] == "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED"
          and s["lineItems"][0]["latestSuccessfulOrderId"] == sub["orderIds"][0] + "..0"
          and s["lineItems"][0]["expiryTime"] > first_expiry, json.dumps(s))
    sim("play.subscriptionEvent", purchaseToken=stoken, action="cancel")
    s = purchases.subscriptionsv2().get(packageName=pkg, token=stoken).execute()
    check("canceled by the user: CANCELED, userInitiatedCancellation", s["subscriptionState"] == "SUBSCRIPTION_STATE_CANCELED"
          and "userInitiatedCancellation" in s.get("canceledStateContext", {}), json.dumps(s))
    sim("play.advanceClock", seconds=30 * 86400 + 1)
    s = purchases.subscriptionsv2().get(packageName=pkg, token=stoken).execute()
    check("past its expiry: EXPIRED", s["subscriptionState"] == "SUBSCRIPTION_STATE_EXPIRED", s["subscriptionState"])

    failing = sim("play.purchase", packageName=pkg, productId="premium", basePlanId="monthly", gracePeriodDays=7, accountHoldDays=30)
    ftoken = failing["purchaseToken"]
    purchases.subscriptions().acknowledge(packageName=pkg, subscriptionId="premium", token=ftoken, body={}).execute()
    sim("play.subscriptionEvent", purchaseToken=ftoken, action="declinePayment")
    sim("play.advanceClock", seconds=30 * 86400 + 1)
    s = purchases.subscriptionsv2().get(packageName=pkg, token=ftoken).execute()
    check("payment declined at renewal: IN_GRACE_PERIOD", s["subscriptionState"] == "SUBSCRIPTION_STATE_IN_GRACE_PERIOD", s["subscriptionState"])
    sim("play.advanceClock", seconds=7 * 86400 + 1)
    s = purchases.subscriptionsv2().get(packageName=pkg, token=ftoken).execute()
    check("grace over: ON_HOLD", s["subscriptionState"] == "SUBSCRIPTION_STATE_ON_HOLD", s["subscriptionState"])
    sim("play.subscriptionEvent", purchaseToken=ftoken, action="fixPayment")
    s = purchases.subscriptionsv2().get(packageName=pkg, token=ftoken).execute()
    check("payment fixed: ACTIVE again", s["subscriptionState"] == "SUBSCRIPTION_STATE_ACTIVE", s["subscriptionState"])

    upgraded = sim("play.purchase", packageName=pkg, productId="premium.plus", basePlanId="monthly", linkedPurchaseToken=ftoken)
    s = purchases.subscriptionsv2().get(packageName=pkg, token=upgraded["purchaseToken"]).execute()
    old = purchases.subscriptionsv2().get(packageName=pkg, token=ftoken).execute()
    # The replaced one reads as canceled by its replacement, its old expiry kept: both look live; only the new one entitles.
    check("an upgrade: linkedPurchaseToken, the old one canceled by its replacement", s.get("linkedPurchaseToken") == ftoken
          and old["subscriptionState"] == "SUBSCRIPTION_STATE_CANCELED" and "replacementCancellation" in old.get("canceledStateContext", {})
          and old["lineItems"][0].get("autoRenewingPlan", {}).get("autoRenewEnabled") is False,
          json.dumps(old))
    status, reason = http_error(lambda: purchases.subscriptionsv2().revoke(packageName=pkg, token=upgraded["purchaseToken"], body={}).execute())
    check("revoke without a refund type: 400", status == 400, f"{status} {reason}")
    attempt("subscriptionsv2.revoke", lambda: purchases.subscriptionsv2().revoke(
        packageName=pkg, token=upgraded["purchaseToken"], body={"revocationContext": {"fullRefund": {}}}).execute())
    s = purchases.subscriptionsv2().get(packageName=pkg, token=upgraded["purchaseToken"]).execute()
    check("revoked: EXPIRED, developerInitiatedCancellation", s["subscriptionState"] == "SUBSCRIPTION_STATE_EXPIRED"
          and "developerInitiatedCancellation" in s.get("canceledStateContext", {}), json.dumps(s))

    # Refund with revoke through the API: canceled, and listed as voided by the developer.
    refunded = sim("play.purchase", packageName=pkg, productId="levels.pack1")
    attempt("orders.refund (revoke)", lambda: api.orders().refund(packageName=pkg, orderId=refunded["orderIds"][0], revoke=True).execute())
    p = purchases.products().get(packageName=pkg, productId="levels.pack1", token=refunded["purchaseToken"]).execute()
    check("orders.refund revoke: purchaseState 1 (canceled)", p["purchaseState"] == 1, json.dumps(p))
    kept = sim("play.purchase", packageName=pkg, productId="levels.pack2")
    purchases.products().acknowledge(packageName=pkg, productId="levels.pack2", token=kept["purchaseToken"], body={}).execute()
    attempt("orders.refund (no revoke)", lambda: api.orders().refund(packageName=pkg, orderId=kept["orderIds"][0]).execute())
    status, reason = http_error(lambda: api.orders().refund(packageName=pkg, orderId="GPA.0000-0000-0000-00000").execute())
    check("orders.refund of an unknown order: 404", status == 404, f"{status} {reason}")

    # Google's three-day rule: not acknowledged, refunded and revoked, reason 8 (unacknowledged purchase).
    late = sim("play.purchase", packageName=pkg, productId="coins.500")
    tester = sim("play.purchase", packageName=pkg, productId="coins.500", testPurchase=True)
    sim("play.advanceClock", seconds=5 * 60 + 1)
    p = purchases.products().get(packageName=pkg, productId="coins.500", token=tester["purchaseToken"]).execute()
    check("a tester's purchase not acknowledged in 5 minutes is revoked", p["purchaseState"] == 1 and p.get("purchaseType") == 0, json.dumps(p))
    p = purchases.products().get(packageName=pkg, productId="coins.500", token=late["purchaseToken"]).execute()
    check("...a real one is not yet", p["purchaseState"] == 0)
    sim("play.advanceClock", seconds=3 * 86400)
    p = purchases.products().get(packageName=pkg, productId="coins.500", token=late["purchaseToken"]).execute()
    check("three days unacknowledged: revoked", p["purchaseState"] == 1, json.dumps(p))

    chargeback = sim("play.purchase", packageName=pkg, productId="coins.100", quantity=3)
    sim("play.refund", purchaseToken=chargeback["purchaseToken"], quantity=1)
    sim("play.refund", purchaseToken=chargeback["purchaseToken"], reason="chargeback")

    # --- voided purchases ------------------------------------------------------------------------------------
    listed = attempt("voidedpurchases.list", lambda: purchases.voidedpurchases().list(packageName=pkg).execute())
    if listed is not None:
        voided = listed.get("voidedPurchases", [])
        tokens = {v["purchaseToken"] for v in voided}
        check("type 0: one-time purchases only, each revoked one", tokens == {refunded["purchaseToken"], tester["purchaseToken"],
              late["purchaseToken"], chargeback["purchaseToken"]} and kept["purchaseToken"] not in tokens, json.dumps(voided))
        by_token = {v["purchaseToken"]: v for v in voided}
        check("reasons and sources: developer refund, Google's unacknowledged refund, a chargeback",
              by_token.get(refunded["purchaseToken"], {}).get("voidedSource") == 1
              and by_token.get(late["purchaseToken"], {}).get("voidedReason") == 8
              and by_token.get(late["purchaseToken"], {}).get("voidedSource") == 2
              and by_token.get(chargeback["purchaseToken"], {}).get("voidedReason") == 7, json.dumps(voided))
        check("Google's VoidedPurchase fields", all(v["kind"] == "androidpublisher#voidedPurchase" and isinstance(v["voidedTimeMillis"], str)
              and v["orderId"].startswith("GPA.") for v in voided), json.dumps(voided))
    both = purchases.voidedpurchases().list(packageName=pkg, type=1).execute().get("voidedPurchases", [])
    check("type 1: the revoked subscription too", upgraded["purchaseToken"] in {v["purchaseToken"] for v in both})
    partial = purchases.voidedpurchases().list(packageName=pkg, includeQuantityBasedPartialRefund=True).execute().get("voidedPurchases", [])
    check("includeQuantityBasedPartialRefund: the partial refund with its voidedQuantity",
          any(v.get("voidedQuantity") == 1 for v in partial), json.dumps(partial))
    pages, page_token = [], None
    while True:
        answer = purchases.voidedpurchases().list(packageName=pkg, type=1, maxResults=2, token=page_token).execute()
        pages.append(answer.get("voidedPurchases", []))
        page_token = answer.get("tokenPagination", {}).get("nextPageToken")
        if not page_token or len(pages) > 10:
            break
    check("paging by token: every one once, oldest first", [v for page in pages for v in page] == both and len(pages) >= 3,
          f"{len(pages)} pages")
    status, _ = http_error(lambda: purchases.voidedpurchases().list(
        packageName=pkg, startTime=str(int(time.time() * 1000) - 40 * 86400 * 1000)).execute())
    check("startTime older than 30 days: 400", status == 400, str(status))

    # --- real-time developer notifications, pushed and verified as Google's receivers verify them ------------
    deadline = time.time() + 30
    while time.time() < deadline:
        sim("play.deliverNotifications")
        with receiver.lock:
            if receiver.failed >= 2 and len(receiver.pushes) >= 20:
                break
        time.sleep(0.2)
    with receiver.lock:
        pushes = list(receiver.pushes)
    check("pushes retried after two 500s and delivered", receiver.failed == 2 and len(pushes) >= 20, f"{len(pushes)} pushes")
    v1 = args.api.rstrip("/") + "/oauth2/v1/certs"
    v3 = args.api.rstrip("/") + "/oauth2/v3/certs"
    notifications, bad = [], []
    for i, (body, authorization) in enumerate(pushes):
        token_text = authorization.removeprefix("Bearer ")
        try:
            claims = id_token.verify_token(token_text, request, audience=receiver.url, certs_url=v1 if i % 2 == 0 else v3)
            if claims["iss"] not in ("accounts.google.com", "https://accounts.google.com") or claims.get("email_verified") is not True \
                    or not claims.get("email", "").endswith(".iam.gserviceaccount.com"):
                bad.append(claims)
        except Exception as error:  # noqa: BLE001
            bad.append(str(error))
        message = body["message"]
        if message["messageId"] != message["message_id"] or message["publishTime"] != message["publish_time"] \
                or not body["subscription"].startswith("projects/"):
            bad.append(body)
        notifications.append(json.loads(base64.b64decode(message["data"])))
    check("every push's OIDC token verifies with google-auth (PEM and JWK certs)", not bad and pushes, json.dumps(bad[:3], default=str))
    try:
        id_token.verify_token(pushes[0][1].removeprefix("Bearer "), request, audience="https://elsewhere.example/", certs_url=v1)
        check("a push token for another audience is refused", False, "accepted")
    except ValueError:
        check("a push token for another audience is refused", True)
    kinds = set()
    for n in notifications:
        if n.get("packageName") != pkg or n.get("version") != "1.0" or not isinstance(n.get("eventTimeMillis"), str):
            kinds.add("malformed")
        for key_name in ("oneTimeProductNotification", "subscriptionNotification"):
            if key_name in n:
                kinds.add((key_name, n[key_name]["notificationType"]))
        if "voidedPurchaseNotification" in n:
            v = n["voidedPurchaseNotification"]
            kinds.add(("voided", v["productType"], v["refundType"]))
    expected = {("oneTimeProductNotification", 1), ("subscriptionNotification", 4), ("subscriptionNotification", 2),
                ("subscriptionNotification", 3), ("subscriptionNotification", 13), ("subscriptionNotification", 6),
                ("subscriptionNotification", 5), ("subscriptionNotification", 1), ("subscriptionNotification", 12),
                ("voided", 2, 1), ("voided", 2, 2), ("voided", 1, 1)}
    check("DeveloperNotifications of each kind, Google's numbers", expected <= kinds and "malformed" not in kinds,
          f"missing {sorted(expected - kinds, key=str)}; extra {sorted(kinds - expected, key=str)}")

    # Last (it moves the clock a month): a DEFERRED plan change, as Google's subscriptions page shows it: the new purchase token at once, listing the replaced
    # plan's item (not renewing, its expiry, deferredItemReplacement naming the new product) and the new plan's (no expiry
    # yet); the old token expired. At that expiry the new plan takes over on the same token, the replaced item's end past.
    base = sim("play.purchase", packageName=pkg, productId="premium.plus", basePlanId="monthly")
    purchases.subscriptions().acknowledge(packageName=pkg, subscriptionId="premium.plus", token=base["purchaseToken"], body={}).execute()
    deferred = sim("play.purchase", packageName=pkg, productId="premium", basePlanId="monthly", linkedPurchaseToken=base["purchaseToken"],
                   replacementMode="DEFERRED")
    s = purchases.subscriptionsv2().get(packageName=pkg, token=deferred["purchaseToken"]).execute()
    old = purchases.subscriptionsv2().get(packageName=pkg, token=base["purchaseToken"]).execute()
    items = {i["productId"]: i for i in s.get("lineItems", [])}
    check("a DEFERRED change: the replaced plan's item (deferredItemReplacement) and the new one's without expiry; the old token expired",
          len(s["lineItems"]) == 2 and set(items) == {"premium.plus", "premium"}
          and items["premium.plus"].get("deferredItemReplacement", {}).get("productId") == "premium"
          and items["premium.plus"]["autoRenewingPlan"]["autoRenewEnabled"] is False and "expiryTime" in items["premium.plus"]
          and "expiryTime" not in items["premium"] and s.get("linkedPurchaseToken") == base["purchaseToken"]
          and old["subscriptionState"] == "SUBSCRIPTION_STATE_EXPIRED", json.dumps([s, old]))
    attempt("subscriptions.acknowledge (a DEFERRED change's token)", lambda: purchases.subscriptions().acknowledge(
        packageName=pkg, subscriptionId="premium.plus", token=deferred["purchaseToken"], body={}).execute())
    sim("play.advanceClock", seconds=30 * 86400 + 1)
    s = purchases.subscriptionsv2().get(packageName=pkg, token=deferred["purchaseToken"]).execute()
    items = {i["productId"]: i for i in s.get("lineItems", [])}
    check("the DEFERRED switch: the new plan's item runs, the replaced one's ended",
          s["subscriptionState"] == "SUBSCRIPTION_STATE_ACTIVE" and set(items) == {"premium.plus", "premium"}
          and items["premium"].get("expiryTime", "") > items["premium.plus"]["expiryTime"]
          and "deferredItemReplacement" not in items["premium.plus"] and items["premium"].get("latestSuccessfulOrderId"), json.dumps(s))

    failures = sum(1 for _, ok in results if not ok)
    print(f"play-judge: {len(results)} checks, {failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
