#!/usr/bin/env python3
"""Apple's own App Store Server Library (`app-store-server-library`, PyPI) judging the App Store simulator.

A judge nobody here wrote: if the simulator and the suite shared a mistaken belief about Apple's formats, every
Swift test would pass while production failed. This script drives a live simulator over its JSON-RPC port (as
the App Store's side: purchases, renewals, refunds...), collects the notifications it POSTs, and checks
everything it signs and serves with Apple's library as Apple ships it:

- SignedDataVerifier, strict (OpenSSL X509_STRICT) with online checks on (OCSP to the simulator's responder):
  transactions of every product type in both environments, renewal info, every notification type, and the
  refusals (another app, another environment, a revoked intermediate);
- AppStoreServerAPIClient with Apple's own token (no `iat`), its base URL pointed at the simulator: every
  endpoint the simulator claims, with paging and Apple's error codes as the library types them;
- ReceiptUtility on the simulator's receipts; offers signed by PromotionalOfferSignatureCreator and
  PromotionalOfferV2SignatureCreator accepted by the simulator; the suite's own promotional-offer and
  introductory-offer-eligibility JWS (--suite-offer) have the header and claims Apple's creators make for the
  same input (the customer's transaction id included).

    python apple_library_judge.py --sim 127.0.0.1:7105 --api http://127.0.0.1:7180 --bundle-id com.example.game \
        [--suite-offer FILE] [--revoke-intermediate]

Prints one line per check and a last line `apple-judge: N checks, M failures`; exits 1 on any failure.
"""
import argparse
import base64
import datetime
import http.server
import json
import sys
import threading
import time
import uuid

from appstoreserverlibrary.api_client import APIError, APIException, AppStoreServerAPIClient, GetTransactionHistoryVersion
from appstoreserverlibrary.jws_signature_creator import IntroductoryOfferEligibilitySignatureCreator, PromotionalOfferV2SignatureCreator
from appstoreserverlibrary.models.ConsumptionRequest import ConsumptionRequest
from appstoreserverlibrary.models.DeliveryStatus import DeliveryStatus
from appstoreserverlibrary.models.Environment import Environment
from appstoreserverlibrary.models.InAppOwnershipType import InAppOwnershipType
from appstoreserverlibrary.models.RevocationType import RevocationType
from appstoreserverlibrary.models.ExtendReasonCode import ExtendReasonCode
from appstoreserverlibrary.models.ExtendRenewalDateRequest import ExtendRenewalDateRequest
from appstoreserverlibrary.models.MassExtendRenewalDateRequest import MassExtendRenewalDateRequest
from appstoreserverlibrary.models.NotificationHistoryRequest import NotificationHistoryRequest
from appstoreserverlibrary.models.RefundPreference import RefundPreference
from appstoreserverlibrary.models.TransactionHistoryRequest import Order, TransactionHistoryRequest
from appstoreserverlibrary.models.UpdateAppAccountTokenRequest import UpdateAppAccountTokenRequest
from appstoreserverlibrary.promotional_offer import PromotionalOfferSignatureCreator
from appstoreserverlibrary.receipt_utility import ReceiptUtility
from appstoreserverlibrary.signed_data_verifier import SignedDataVerifier, VerificationStatus

from judge_common import APP_APPLE_ID, Simulator, attempt, check, results, status_of
from apple_retention_judge import messaging_checks, realtime_checks
class Inbox(http.server.ThreadingHTTPServer):
    """Where the simulator POSTs its notifications ({"signedPayload": ...}), per environment path."""

    def __init__(self):
        self.received = {"Production": [], "Sandbox": []}
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), InboxHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def url(self, environment):
        return f"http://127.0.0.1:{self.server_address[1]}/{environment}"

    def take(self):
        with self.lock:
            taken = {k: list(v) for k, v in self.received.items()}
            for v in self.received.values():
                v.clear()
        return taken


class InboxHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        environment = self.path.strip("/")
        with self.server.lock:
            self.server.received.setdefault(environment, []).append(json.loads(body)["signedPayload"])
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def verifier(root, environment, bundle_id, online=True):
    app_apple_id = APP_APPLE_ID if environment == Environment.PRODUCTION else None
    return SignedDataVerifier([root], online, environment, bundle_id, app_apple_id)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sim", required=True, help="the simulator's JSON-RPC address HOST:PORT")
    parser.add_argument("--api", required=True, help="the simulator's HTTP base URL (App Store Server API, OCSP)")
    parser.add_argument("--bundle-id", required=True)
    parser.add_argument("--suite-offer", help="JSON file: the suite's fulfillment.signOffer answer and its productId/offerId")
    args = parser.parse_args()

    sim = Simulator(args.sim)
    bundle = args.bundle_id
    root = base64.b64decode(sim("sim.trustAnchor")["jwsRoot"])
    environments = {"production": Environment.PRODUCTION, "sandbox": Environment.SANDBOX}
    verifiers = {name: verifier(root, env, bundle) for name, env in environments.items()}
    inbox = Inbox()
    for name, env in environments.items():
        sim("sim.setNotificationURL", environment=name, url=inbox.url(env.value))

    # Transactions of every product type, in both environments.
    purchases = {}
    for name in environments:
        apple_id = f"judge-{name}@icloud"
        for product, kind in (("coins.100", "consumable"), ("pack.castle", "nonConsumable"),
                              ("sub.premium", "autoRenewable"), ("pass.season", "nonRenewing")):
            bought = sim("sim.purchase", appleId=apple_id, bundleId=bundle, productId=product, productType=kind,
                         environment=name, appAccountToken=str(uuid.uuid4()))
            purchases[(name, kind)] = bought
            decoded = attempt(f"{name} {kind}: verify_and_decode_signed_transaction",
                              lambda: verifiers[name].verify_and_decode_signed_transaction(bought["signedTransaction"]))
            if decoded is not None:
                check(f"{name} {kind}: verified, environment {decoded.rawEnvironment}, product {decoded.productId}",
                      decoded.transactionId == bought["transactionId"] and decoded.productId == product
                      and decoded.rawEnvironment == bought["environment"] and decoded.bundleId == bundle)

    # Refusals: another app, another environment.
    production_coins = purchases[("production", "consumable")]["signedTransaction"]
    other_app = verifier(root, Environment.PRODUCTION, "com.example.other")
    check("another app's verifier refuses: INVALID_APP_IDENTIFIER",
          status_of(lambda: other_app.verify_and_decode_signed_transaction(production_coins))
          == VerificationStatus.INVALID_APP_IDENTIFIER)
    check("the Sandbox verifier refuses a Production transaction: INVALID_ENVIRONMENT",
          status_of(lambda: verifiers["sandbox"].verify_and_decode_signed_transaction(production_coins))
          == VerificationStatus.INVALID_ENVIRONMENT)

    # Offers and receipts first: the simulator checks an offer's age on its clock, which moves on below.
    receipt_checks(sim, bundle)
    offer_checks(sim, bundle, args.suite_offer)

    # Notifications of every kind the simulator sends, verified with their nested payloads.
    subs = {name: purchases[(name, "autoRenewable")] for name in environments}
    for name, sub in subs.items():
        apple_id = f"judge-{name}@icloud"
        sim("sim.setAutoRenew", appleId=apple_id, transactionId=sub["transactionId"], enabled=False)
        sim("sim.setAutoRenew", appleId=apple_id, transactionId=sub["transactionId"], enabled=True)
        sim("sim.lifecycleEvent", appleId=apple_id, transactionId=sub["transactionId"], event="priceIncrease")
        sim("sim.lifecycleEvent", appleId=apple_id, transactionId=sub["transactionId"], event="acceptPriceIncrease")
        sim("sim.lifecycleEvent", appleId=apple_id, transactionId=sub["transactionId"], event="downgrade",
            productId="sub.basic")
        sim("sim.lifecycleEvent", appleId=apple_id, transactionId=sub["transactionId"], event="cancelDowngrade")
        coins = purchases[(name, "consumable")]
        sim("sim.refundDecision", appleId=apple_id, transactionId=coins["transactionId"], event="request")
        sim("sim.refundDecision", appleId=apple_id, transactionId=coins["transactionId"], event="decline")
        sim("sim.refund", appleId=apple_id, transactionId=coins["transactionId"])
        sim("sim.refundDecision", appleId=apple_id, transactionId=coins["transactionId"], event="reverse")
        # A prorated refund (from consumption): REFUND_PRORATED with the share refunded, in milliunits.
        extra = sim("sim.purchase", appleId=apple_id, bundleId=bundle, productId="coins.100", productType="consumable",
                    environment=name)
        prorated = sim("sim.refund", appleId=apple_id, transactionId=extra["transactionId"], revocationPercentage=33333)
        refund = attempt(f"{name}: a prorated REFUND", lambda: verifiers[name].verify_and_decode_notification(prorated["signedPayload"]))
        refunded = refund and attempt(f"{name}: a prorated REFUND's transaction",
                                      lambda: verifiers[name].verify_and_decode_signed_transaction(refund.data.signedTransactionInfo))
        check(f"{name}: a prorated refund is REFUND_PRORATED, 33333 milliunits",
              refunded is not None and refunded.revocationType == RevocationType.REFUND_PRORATED
              and refunded.revocationPercentage == 33333, repr(refunded and (refunded.rawRevocationType, refunded.revocationPercentage)))
        # Family Sharing: the member's own transaction (FAMILY_SHARED), then the member leaves: REVOKE about it.
        pack = purchases[(name, "nonConsumable")]
        member = sim("sim.shareWithFamily", appleId=apple_id, transactionId=pack["transactionId"],
                     memberAppleId=f"judge-{name}-family@icloud")
        shared = attempt(f"{name}: a family member's transaction",
                         lambda: verifiers[name].verify_and_decode_signed_transaction(member["signedTransaction"]))
        check(f"{name}: a family member's transaction is FAMILY_SHARED, its own original",
              shared is not None and shared.inAppOwnershipType == InAppOwnershipType.FAMILY_SHARED
              and shared.originalTransactionId != pack["transactionId"])
        sim("sim.lifecycleEvent", appleId=f"judge-{name}-family@icloud", transactionId=member["transactionId"],
            event="revokeFamilySharing")
        for kind, subtype in (("OFFER_REDEEMED", "UPGRADE"), ("RENEWAL_EXTENSION", "SUMMARY"),
                              ("EXTERNAL_PURCHASE_TOKEN", "CREATED")):
            sim("sim.notify", appleId=apple_id, transactionId=sub["transactionId"], notificationType=kind,
                subtype=subtype)
        sim("sim.billing", appleId=apple_id, transactionId=sub["transactionId"], event="fail", gracePeriodDays=6)
    sim("sim.advanceClock", seconds=31 * 86400)   # DID_FAIL_TO_RENEW / GRACE_PERIOD
    sim("sim.advanceClock", seconds=7 * 86400)    # GRACE_PERIOD_EXPIRED
    for name, sub in subs.items():
        sim("sim.billing", appleId=f"judge-{name}@icloud", transactionId=sub["transactionId"], event="recover")
    sim("sim.advanceClock", seconds=31 * 86400)   # DID_RENEW
    for name, sub in subs.items():
        sim("sim.setAutoRenew", appleId=f"judge-{name}@icloud", transactionId=sub["transactionId"], enabled=False)
    sim("sim.advanceClock", seconds=31 * 86400)   # EXPIRED / VOLUNTARY
    sim("sim.deliverNotifications")

    seen = set()
    for environment, payloads in inbox.take().items():
        name = environment.lower()
        for payload in payloads:
            decoded = attempt(f"{name}: verify_and_decode_notification",
                              lambda: verifiers[name].verify_and_decode_notification(payload))
            if decoded is None:
                continue
            label = f"{name} {decoded.rawNotificationType}" + (f"/{decoded.rawSubtype}" if decoded.rawSubtype else "")
            seen.add((name, decoded.rawNotificationType))
            data = decoded.data
            if data is not None and data.signedTransactionInfo:
                nested = attempt(f"{label}: nested transaction",
                                 lambda: verifiers[name].verify_and_decode_signed_transaction(data.signedTransactionInfo))
                if nested is not None and decoded.rawNotificationType == "REVOKE":
                    check(f"{label}: about a family member's transaction",
                          nested.inAppOwnershipType == InAppOwnershipType.FAMILY_SHARED)
            if data is not None and data.signedRenewalInfo:
                info = attempt(f"{label}: nested renewal info",
                               lambda: verifiers[name].verify_and_decode_renewal_info(data.signedRenewalInfo))
                if info is not None:
                    check(f"{label}: renewal info verified ({info.rawEnvironment})", info.rawEnvironment == environment)
            check(f"{label}: verified", True)
    expected = {"SUBSCRIBED", "ONE_TIME_CHARGE", "DID_CHANGE_RENEWAL_STATUS", "PRICE_INCREASE", "DID_CHANGE_RENEWAL_PREF",
                "CONSUMPTION_REQUEST", "REFUND_DECLINED", "REFUND", "REFUND_REVERSED", "REVOKE", "OFFER_REDEEMED",
                "RENEWAL_EXTENSION", "EXTERNAL_PURCHASE_TOKEN", "DID_FAIL_TO_RENEW", "GRACE_PERIOD_EXPIRED",
                "DID_RENEW", "EXPIRED"}
    for name in environments:
        missing = sorted(t for t in expected if (name, t) not in seen)
        check(f"{name}: every notification type arrived and verified", not missing, f"missing {missing}")

    api_checks(sim, args, bundle, root, verifiers, purchases, inbox)
    realtime_checks(sim, args, root, bundle, verifiers, purchases)
    messaging_checks(sim, args, bundle, verifiers, purchases)

    # A revoked intermediate: Apple's verifier, asking the simulator's OCSP responder, refuses its chain.
    sim("sim.revokeCertificate", certificate="jws-intermediate")
    fresh = verifier(root, Environment.PRODUCTION, bundle)
    check("a revoked intermediate is refused: VERIFICATION_FAILURE",
          status_of(lambda: fresh.verify_and_decode_signed_transaction(production_coins))
          == VerificationStatus.VERIFICATION_FAILURE)

    failures = sum(1 for _, ok in results if not ok)
    print(f"apple-judge: {len(results)} checks, {failures} failures")
    return 1 if failures else 0


def api_error(call):
    try:
        call()
        return None
    except APIException as error:
        return error


def api_checks(sim, args, bundle, root, verifiers, purchases, inbox):
    key = sim("sim.apiKey")
    clients = {}
    for name, env in (("production", Environment.PRODUCTION), ("sandbox", Environment.SANDBOX)):
        client = AppStoreServerAPIClient(key["privateKey"].encode(), key["keyId"], key["issuerId"], bundle, env)
        client._base_url = args.api + ("" if name == "production" else "/sandbox")  # the simulator, not Apple
        clients[name] = client

    for name, client in clients.items():
        # An upgrade: the period it replaced says isUpgraded (Apple: look for the transaction with the higher service).
        yearly = sim("sim.purchase", appleId=f"judge-{name}-upgrade@icloud", bundleId=bundle, productId="sub.basic",
                     productType="autoRenewable", environment=name, subscriptionPeriodDays=365)
        sim("sim.lifecycleEvent", appleId=f"judge-{name}-upgrade@icloud", transactionId=yearly["transactionId"], event="upgrade",
            productId="sub.premium", subscriptionPeriodDays=30)
        replaced = attempt(f"API {name}: get_transaction_info of the period an upgrade replaced",
                           lambda: client.get_transaction_info(yearly["transactionId"]))
        replaced = replaced and attempt(f"API {name}: its signedTransactionInfo",
                                        lambda: verifiers[name].verify_and_decode_signed_transaction(replaced.signedTransactionInfo))
        check(f"API {name}: the period an upgrade replaced is isUpgraded, its expiry kept",
              replaced is not None and replaced.isUpgraded is True and replaced.revocationDate is None,
              repr(replaced and (replaced.isUpgraded, replaced.revocationDate)))
        sub = purchases[(name, "autoRenewable")]
        asked_at = sim("sim.advanceClock", seconds=0)["nowMs"]
        info = attempt(f"API {name}: get_transaction_info", lambda: client.get_transaction_info(sub["transactionId"]))
        if info is not None:
            decoded = attempt(f"API {name}: its signedTransactionInfo",
                              lambda: verifiers[name].verify_and_decode_signed_transaction(info.signedTransactionInfo))
            check(f"API {name}: get_transaction_info, verified", decoded is not None
                  and decoded.transactionId == sub["transactionId"])
            # Apple's signedDate is when it signed: a copy asked for now is signed now, after its purchase.
            check(f"API {name}: get_transaction_info, signed when asked", decoded is not None
                  and decoded.signedDate >= asked_at > decoded.purchaseDate,
                  repr(decoded and (decoded.signedDate, asked_at, decoded.purchaseDate)))
        statuses = attempt(f"API {name}: get_all_subscription_statuses",
                           lambda: client.get_all_subscription_statuses(sub["transactionId"]))
        if statuses is not None:
            items = [t for group in statuses.data or [] for t in group.lastTransactions or []]
            check(f"API {name}: get_all_subscription_statuses, {len(items)} subscription(s)", items and all(
                verifiers[name].verify_and_decode_renewal_info(t.signedRenewalInfo) for t in items))
        order = purchases[(name, "consumable")].get("orderId")
        looked = attempt(f"API {name}: look_up_order_id", lambda: client.look_up_order_id(order))
        if looked is not None:
            check(f"API {name}: look_up_order_id finds the order", looked.rawStatus == 0 and looked.signedTransactions)
        refunds = attempt(f"API {name}: get_refund_history",
                          lambda: client.get_refund_history(purchases[(name, "consumable")]["transactionId"], None))
        if refunds is not None:
            check(f"API {name}: get_refund_history answers", refunds.hasMore is not None)

    # History: v1 (the library's default) and v2, every page.
    production = clients["production"]
    first = None
    for i in range(23):
        bought = sim("sim.purchase", appleId="pager@icloud", bundleId=bundle, productId="coins.100",
                     productType="consumable")
        first = first or bought["transactionId"]
    for version in (GetTransactionHistoryVersion.V1, GetTransactionHistoryVersion.V2):
        seen, revision, pages = [], None, 0
        while pages < 10:
            page = attempt(f"API get_transaction_history {version.value}",
                           lambda: production.get_transaction_history(
                               first, revision, TransactionHistoryRequest(sort=Order.ASCENDING), version))
            if page is None:
                break
            pages += 1
            seen += [verifiers["production"].verify_and_decode_signed_transaction(t).transactionId
                     for t in page.signedTransactions or []]
            revision = page.revision
            if not page.hasMore:
                break
        check(f"API get_transaction_history {version.value}: 23 transactions over {pages} pages",
              len(set(seen)) == 23 and pages == 2, f"{len(seen)} over {pages} pages")

    # Notification history, requested test notification, token, extension.
    now_ms = int(time.time() * 1000)
    sub = purchases[("production", "autoRenewable")]
    token = attempt("API request_test_notification", lambda: production.request_test_notification())
    if token is not None:
        sim("sim.deliverNotifications")
        status = attempt("API get_test_notification_status",
                         lambda: production.get_test_notification_status(token.testNotificationToken))
        check("API get_test_notification_status: a signed TEST notification", status is not None
              and verifiers["production"].verify_and_decode_notification(status.signedPayload).rawNotificationType == "TEST")
    history = attempt("API get_notification_history", lambda: production.get_notification_history(
        None, NotificationHistoryRequest(startDate=now_ms - 86400000, endDate=now_ms + 200 * 86400000,
                                         transactionId=sub["transactionId"])))
    if history is not None:
        check(f"API get_notification_history: {len(history.notificationHistory or [])} signed notifications",
              history.notificationHistory and all(
                  verifiers["production"].verify_and_decode_notification(n.signedPayload)
                  for n in history.notificationHistory))
    attempt("API set_app_account_token", lambda: production.set_app_account_token(
        sub["originalTransactionId"] if "originalTransactionId" in sub else sub["transactionId"],
        UpdateAppAccountTokenRequest(appAccountToken=str(uuid.uuid4()))))
    check("API set_app_account_token answered", True)
    pack = purchases[("production", "nonConsumable")]
    member = sim("sim.shareWithFamily", appleId="judge-production@icloud", transactionId=pack["transactionId"],
                 memberAppleId="judge-api-family@icloud")
    family = api_error(lambda: production.set_app_account_token(
        member["transactionId"], UpdateAppAccountTokenRequest(appAccountToken=str(uuid.uuid4()))))
    check("API set_app_account_token error: a family member's transaction is 400 / 4000185 (FAMILY_TRANSACTION_NOT_SUPPORTED)",
          family is not None and family.http_status_code == 400 and family.api_error == APIError.FAMILY_TRANSACTION_NOT_SUPPORTED_ERROR,
          repr(family and (family.http_status_code, family.raw_api_error)))
    for ownership, expected in ((InAppOwnershipType.FAMILY_SHARED, 1), (InAppOwnershipType.PURCHASED, 0)):
        owned = attempt(f"API get_transaction_history of a family member, {ownership.value}",
                        lambda: production.get_transaction_history(
                            member["transactionId"], None, TransactionHistoryRequest(inAppOwnershipType=ownership),
                            GetTransactionHistoryVersion.V2))
        check(f"API get_transaction_history of a family member, {ownership.value}: {expected}",
              owned is not None and len(owned.signedTransactions or []) == expected,
              repr(owned and len(owned.signedTransactions or [])))
    renewed = sim("sim.purchase", appleId="extend@icloud", bundleId=bundle, productId="sub.premium",
                  productType="autoRenewable")
    extended = attempt("API extend_subscription_renewal_date", lambda: production.extend_subscription_renewal_date(
        renewed["originalTransactionId"], ExtendRenewalDateRequest(
            extendByDays=3, extendReasonCode=ExtendReasonCode.CUSTOMER_SATISFACTION, requestIdentifier=str(uuid.uuid4()))))
    check("API extend_subscription_renewal_date: success", extended is not None and extended.success)

    # Finish Transaction: 200, no body; the finished consumable leaves the receipt; Apple's refusals as documented.
    bought = sim("sim.purchase", appleId="finish@icloud", bundleId=bundle, productId="coins.100", productType="consumable")
    def in_receipt():
        receipt = sim("sim.receipt", appleId="finish@icloud", bundleId=bundle)["receiptData"]
        return ReceiptUtility().extract_transaction_id_from_app_receipt(receipt)
    check("API finish_transaction: an unfinished consumable is in the receipt", in_receipt() == bought["transactionId"])
    finished = attempt("API finish_transaction", lambda: production.finish_transaction(bought["transactionId"]))
    check("API finish_transaction answered", finished is None and api_error(
        lambda: production.finish_transaction(bought["transactionId"])) is None, "a second finish is harmless")
    calls = sim("sim.serverFinishes", transactionId=bought["transactionId"])["finishedAtMs"]
    check("API finish_transaction: the simulator recorded both calls", len(calls) == 2, repr(calls))
    check("API finish_transaction: the finished consumable left the receipt", in_receipt() is None)
    unknown = api_error(lambda: production.finish_transaction("9999999999"))
    check("API finish_transaction error: unknown transaction is 404 / 4040010", unknown is not None
          and unknown.http_status_code == 404 and unknown.raw_api_error == 4040010,
          repr(unknown and (unknown.http_status_code, unknown.raw_api_error)))
    invalid = api_error(lambda: production.finish_transaction("not-an-id"))
    check("API finish_transaction error: an invalid id is 400 / 4000006", invalid is not None
          and invalid.http_status_code == 400 and invalid.raw_api_error == 4000006,
          repr(invalid and (invalid.http_status_code, invalid.raw_api_error)))

    # The app transaction: StoreKit's (sim.appTransaction) and Get App Transaction Info's, by any transaction id of the
    # customer or by its own id, judged by Apple's verifier; the customer's transactions name it.
    device = sim("sim.appTransaction", appleId="finish@icloud", bundleId=bundle)
    storekit = attempt("verify_and_decode_app_transaction (StoreKit's)",
                       lambda: verifiers["production"].verify_and_decode_app_transaction(device["signedAppTransaction"]))
    check("verify_and_decode_app_transaction: Production, iOS, the Apple ID's id", storekit is not None
          and storekit.appTransactionId == device["appTransactionId"] and storekit.receiptType == Environment.PRODUCTION
          and storekit.rawOriginalPlatform == "iOS" and storekit.appAppleId == APP_APPLE_ID and storekit.bundleId == bundle,
          repr(storekit))
    check("verify_and_decode_app_transaction: the Sandbox verifier refuses it (INVALID_ENVIRONMENT)",
          status_of(lambda: verifiers["sandbox"].verify_and_decode_app_transaction(device["signedAppTransaction"]))
          == VerificationStatus.INVALID_ENVIRONMENT)
    check("verify_and_decode_app_transaction: another app's verifier refuses it (INVALID_APP_IDENTIFIER)",
          status_of(lambda: verifier(root, Environment.PRODUCTION, "com.example.other").verify_and_decode_app_transaction(
              device["signedAppTransaction"])) == VerificationStatus.INVALID_APP_IDENTIFIER)
    named = verifiers["production"].verify_and_decode_signed_transaction(bought["signedTransaction"])
    check("the customer's transactions name their appTransactionId", named.appTransactionId == device["appTransactionId"],
          repr(named.appTransactionId))
    for label, any_id in (("a transaction id", bought["transactionId"]), ("the appTransactionId", device["appTransactionId"])):
        info = attempt(f"API get_app_transaction_info by {label}", lambda: production.get_app_transaction_info(any_id))
        app = info and attempt(f"API get_app_transaction_info by {label}: its signedAppTransactionInfo",
                               lambda: verifiers["production"].verify_and_decode_app_transaction(info.signedAppTransactionInfo))
        check(f"API get_app_transaction_info by {label}, verified", app is not None
              and app.appTransactionId == device["appTransactionId"], repr(app))
    sandbox_bought = purchases[("sandbox", "consumable")]
    sandbox_info = attempt("API sandbox get_app_transaction_info",
                           lambda: clients["sandbox"].get_app_transaction_info(sandbox_bought["transactionId"]))
    sandbox_app = sandbox_info and attempt("API sandbox get_app_transaction_info: verified", lambda: verifiers[
        "sandbox"].verify_and_decode_app_transaction(sandbox_info.signedAppTransactionInfo))
    check("API sandbox get_app_transaction_info: a Sandbox app transaction", sandbox_app is not None
          and sandbox_app.receiptType == Environment.SANDBOX)
    for label, bad_id, status, code in (("an unknown id", "9999999999", 404, 4040010), ("an invalid id", "not-an-id", 400, 4000006)):
        error = api_error(lambda: production.get_app_transaction_info(bad_id))
        check(f"API get_app_transaction_info error: {label} is {status} / {code}", error is not None
              and error.http_status_code == status and error.raw_api_error == code,
              repr(error and (error.http_status_code, error.raw_api_error)))

    # Extend Subscription Renewal Dates for All Active Subscribers: accepted at once, carried out afterwards (here when
    # sim.deliverNotifications asks), its status, one RENEWAL_EXTENDED and the RENEWAL_EXTENSION / SUMMARY with the counts.
    sim("sim.purchase", appleId="mass@icloud", bundleId=bundle, productId="judge.mass", productType="autoRenewable")
    sim("sim.deliverNotifications")
    inbox.take()
    request_id = str(uuid.uuid4())
    mass = MassExtendRenewalDateRequest(extendByDays=3, extendReasonCode=ExtendReasonCode.SERVICE_ISSUE_OR_OUTAGE,
                                        requestIdentifier=request_id, productId="judge.mass")
    accepted = attempt("API extend_renewal_date_for_all_active_subscribers",
                       lambda: production.extend_renewal_date_for_all_active_subscribers(mass))
    check("API extend_renewal_date_for_all_active_subscribers answered its requestIdentifier",
          accepted is not None and accepted.requestIdentifier == request_id, repr(accepted))
    sim("sim.deliverNotifications")
    done = attempt("API get_status_of_subscription_renewal_date_extensions",
                   lambda: production.get_status_of_subscription_renewal_date_extensions(request_id, "judge.mass"))
    check("API get_status_of_subscription_renewal_date_extensions: complete, one extended", done is not None and done.complete
          and done.succeededCount == 1 and done.failedCount == 0 and done.completeDate, repr(done))
    sent = [verifiers["production"].verify_and_decode_notification(p) for p in inbox.take().get("Production", [])]
    summary = next((n.summary for n in sent if n.rawNotificationType == "RENEWAL_EXTENSION" and n.rawSubtype == "SUMMARY"), None)
    check("RENEWAL_EXTENSION / SUMMARY verified, with the request and its counts", summary is not None
          and summary.requestIdentifier == request_id and summary.productId == "judge.mass" and summary.succeededCount == 1
          and summary.failedCount == 0 and summary.bundleId == bundle, repr(summary))
    check("one RENEWAL_EXTENDED for the one subscriber", len([n for n in sent if n.rawNotificationType == "RENEWAL_EXTENDED"]) == 1)
    for label, bad, status, code in (
            ("91 days is 400 / 4000009", lambda: production.extend_renewal_date_for_all_active_subscribers(
                MassExtendRenewalDateRequest(extendByDays=91, extendReasonCode=ExtendReasonCode.OTHER,
                                             requestIdentifier=str(uuid.uuid4()), productId="judge.mass")), 400, 4000009),
            ("an unknown request's status is 404 / 4040009", lambda: production.get_status_of_subscription_renewal_date_extensions(
                str(uuid.uuid4()), "judge.mass"), 404, 4040009)):
        error = api_error(bad)
        check(f"API mass extension error: {label}", error is not None and error.http_status_code == status
              and error.raw_api_error == code, repr(error and (error.http_status_code, error.raw_api_error)))

    # Send Consumption Information v2 (send_consumption_information): 202, recorded as sent; Apple's refusals. And
    # v1 (send_consumption_data, deprecated by the library), which the simulator keeps for older clients.
    request = ConsumptionRequest(customerConsented=True, sampleContentProvided=False, deliveryStatus=DeliveryStatus.DELIVERED,
                                 consumptionPercentage=25000, refundPreference=RefundPreference.GRANT_PRORATED)
    sent = api_error(lambda: production.send_consumption_information(bought["transactionId"], request))
    reports = sim("sim.consumptionReports", transactionId=bought["transactionId"])["reports"]
    check("API send_consumption_information (v2) accepted and recorded", sent is None and reports and reports[-1].get(
        "deliveryStatus") == "DELIVERED" and reports[-1].get("consumptionPercentage") == 25000, repr(sent or reports))
    for label, bad, code in (
            ("customerConsented false is 400 / 4000035",
             ConsumptionRequest(customerConsented=False, sampleContentProvided=False, deliveryStatus=DeliveryStatus.DELIVERED), 4000035),
            ("a percentage on an auto-renewable is 400 / 4000209",
             ConsumptionRequest(customerConsented=True, sampleContentProvided=False, deliveryStatus=DeliveryStatus.DELIVERED,
                                consumptionPercentage=1000), 4000209)):
        target = purchases[("production", "autoRenewable")]["transactionId"] if "auto-renewable" in label else bought["transactionId"]
        error = api_error(lambda: production.send_consumption_information(target, bad))
        check(f"API send_consumption_information error: {label}", error is not None and error.http_status_code == 400
              and error.raw_api_error == code, repr(error and (error.http_status_code, error.raw_api_error)))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from appstoreserverlibrary.models.AccountTenure import AccountTenure
        from appstoreserverlibrary.models.ConsumptionRequestV1 import ConsumptionRequestV1
        from appstoreserverlibrary.models.ConsumptionStatus import ConsumptionStatus
        from appstoreserverlibrary.models.DeliveryStatusV1 import DeliveryStatusV1
        from appstoreserverlibrary.models.LifetimeDollarsPurchased import LifetimeDollarsPurchased
        from appstoreserverlibrary.models.LifetimeDollarsRefunded import LifetimeDollarsRefunded
        from appstoreserverlibrary.models.Platform import Platform
        from appstoreserverlibrary.models.PlayTime import PlayTime
        from appstoreserverlibrary.models.UserStatus import UserStatus
        v1 = ConsumptionRequestV1(
            customerConsented=True, consumptionStatus=ConsumptionStatus.PARTIALLY_CONSUMED, platform=Platform.APPLE,
            sampleContentProvided=False, deliveryStatus=DeliveryStatusV1.DELIVERED_AND_WORKING_PROPERLY, appAccountToken="",
            accountTenure=AccountTenure.THIRTY_DAYS_TO_NINETY_DAYS, playTime=PlayTime.UNDECLARED,
            lifetimeDollarsRefunded=LifetimeDollarsRefunded.UNDECLARED, lifetimeDollarsPurchased=LifetimeDollarsPurchased.UNDECLARED,
            userStatus=UserStatus.ACTIVE)
        sent_v1 = api_error(lambda: production.send_consumption_data(bought["transactionId"], v1))
    check("API send_consumption_data (v1) still accepted", sent_v1 is None, repr(sent_v1 and (sent_v1.http_status_code, sent_v1.raw_api_error)))

    # Apple's errors, as the library types them.
    missing = api_error(lambda: production.get_transaction_info("9999999999"))
    check("API error: unknown transaction is 404 / 4040010", missing is not None and missing.http_status_code == 404
          and missing.raw_api_error == 4040010, repr(missing and (missing.http_status_code, missing.raw_api_error)))
    sim("sim.setFault", mode="http429", count=1)
    limited = api_error(lambda: production.get_transaction_info(sub["transactionId"]))
    check("API error: rate limit is 429 / 4290000", limited is not None and limited.http_status_code == 429
          and limited.raw_api_error == 4290000)
    wrong = AppStoreServerAPIClient(key["privateKey"].encode(), "WRONGKEYID", key["issuerId"], bundle,
                                    Environment.PRODUCTION)
    wrong._base_url = args.api
    refused = api_error(lambda: wrong.get_transaction_info(sub["transactionId"]))
    check("API error: a token with another key id is 401", refused is not None and refused.http_status_code == 401)


def receipt_checks(sim, bundle):
    bought = sim("sim.purchase", appleId="receipt@icloud", bundleId=bundle, productId="pack.castle",
                 productType="nonConsumable")
    found = attempt("ReceiptUtility", lambda: ReceiptUtility().extract_transaction_id_from_app_receipt(
        bought["receiptData"]))
    check("ReceiptUtility reads the transaction id from the simulator's receipt", found == bought["transactionId"],
          f"{found} != {bought['transactionId']}")


def offer_checks(sim, bundle, suite_offer_file):
    key = sim("sim.offerKey")
    pem = key["privateKey"].encode()
    token = str(uuid.uuid4())
    nonce = uuid.uuid4()
    timestamp = int(time.time() * 1000)
    signature = PromotionalOfferSignatureCreator(pem, key["keyId"], bundle).create_signature(
        "sub.premium", "welcome", token, nonce, timestamp)
    offer = {"offerIdentifier": "welcome", "keyIdentifier": key["keyId"], "nonce": str(nonce), "timestamp": timestamp,
             "signature": signature}
    bought = attempt("an offer signed by PromotionalOfferSignatureCreator", lambda: sim(
        "sim.purchase", appleId="offer1@icloud", bundleId=bundle, productId="sub.premium",
        productType="autoRenewable", appAccountToken=token, offer=offer))
    check("the simulator accepts PromotionalOfferSignatureCreator's signature", bought is not None)
    tampered = dict(offer, nonce=str(uuid.uuid4()))
    check("the simulator refuses it for another nonce", attempt_refused(lambda: sim(
        "sim.purchase", appleId="offer1@icloud", bundleId=bundle, productId="sub.premium",
        productType="autoRenewable", appAccountToken=token, offer=tampered)))
    creator = PromotionalOfferV2SignatureCreator(pem, key["keyId"], key["issuerId"], bundle)
    jws = creator.create_signature("sub.premium", "welcome", None)
    bought = attempt("an offer JWS by PromotionalOfferV2SignatureCreator", lambda: sim(
        "sim.purchase", appleId="offer2@icloud", bundleId=bundle, productId="sub.premium",
        productType="autoRenewable", offerJWS=jws))
    check("the simulator accepts PromotionalOfferV2SignatureCreator's JWS", bought is not None)

    if suite_offer_file:
        suite = json.load(open(suite_offer_file))
        same_key = PromotionalOfferV2SignatureCreator(
            suite["privateKey"].encode(), suite["keyId"], suite["issuerId"], bundle)
        apple = same_key.create_signature(suite["productId"], suite["offerId"], suite.get("transactionId"))

        def parts(token):
            header, payload, _ = token.split(".")
            pad = lambda s: s + "=" * (-len(s) % 4)  # noqa: E731
            return (json.loads(base64.urlsafe_b64decode(pad(header))), json.loads(base64.urlsafe_b64decode(pad(payload))))

        intro_creator = IntroductoryOfferEligibilitySignatureCreator(
            suite["privateKey"].encode(), suite["keyId"], suite["issuerId"], bundle)
        apple_intro = intro_creator.create_signature(
            suite["productId"], suite["allowIntroductoryOffer"], suite["transactionId"])
        for name, ours, theirs in (("promotional offer", suite["jws"], apple),
                                   ("introductory offer eligibility", suite["introductoryOfferJWS"], apple_intro)):
            (suite_header, suite_claims), (apple_header, apple_claims) = parts(ours), parts(theirs)
            check(f"the suite's {name} JWS header equals Apple's creator's", suite_header == apple_header,
                  f"{suite_header} != {apple_header}")
            check(f"the suite's {name} JWS has the claims Apple's creator makes", set(suite_claims) == set(apple_claims),
                  f"{sorted(suite_claims)} != {sorted(apple_claims)}")
            generated = {"iat", "nonce"}
            same = {k: suite_claims.get(k) for k in apple_claims if k not in generated}
            check("... with the same values (iat and nonce aside)", same == {k: v for k, v in apple_claims.items()
                                                                             if k not in generated}, f"{same}")


def attempt_refused(call):
    try:
        call()
        return False
    except RuntimeError:
        return True


if __name__ == "__main__":
    sys.exit(main())
