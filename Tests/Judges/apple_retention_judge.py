"""Retention Messaging, judged by Apple's own library (app-store-server-library): the simulator's signed realtime
requests verified by `verify_and_decode_realtime_request`; answers written as the library's `RealtimeResponseBody`, with
promotional offers signed by the library's signature creators; and the management API (images, messages, default
messages, the realtime URL, the performance test) called with the library's `AppStoreServerAPIClient`, with Apple's
documented refusals."""

import http.server
import json
import struct
import threading
import time
import uuid
import zlib

from appstoreserverlibrary.api_client import APIException, AppStoreServerAPIClient
from appstoreserverlibrary.jws_signature_creator import PromotionalOfferV2SignatureCreator
from appstoreserverlibrary.models.AlternateProduct import AlternateProduct
from appstoreserverlibrary.models.DefaultConfigurationRequest import DefaultConfigurationRequest
from appstoreserverlibrary.models.Environment import Environment
from appstoreserverlibrary.models.ImageSize import ImageSize
from appstoreserverlibrary.models.LibraryUtility import _get_cattrs_converter
from appstoreserverlibrary.models.Message import Message
from appstoreserverlibrary.models.PerformanceTestRequest import PerformanceTestRequest
from appstoreserverlibrary.models.PromotionalOffer import PromotionalOffer
from appstoreserverlibrary.models.PromotionalOfferSignatureV1 import PromotionalOfferSignatureV1
from appstoreserverlibrary.models.RealtimeResponseBody import RealtimeResponseBody
from appstoreserverlibrary.models.RealtimeUrlRequest import RealtimeUrlRequest
from appstoreserverlibrary.models.UploadMessageImage import UploadMessageImage
from appstoreserverlibrary.models.UploadMessageRequestBody import UploadMessageRequestBody
from appstoreserverlibrary.promotional_offer import PromotionalOfferSignatureCreator
from appstoreserverlibrary.signed_data_verifier import SignedDataVerifier, VerificationException, VerificationStatus

from judge_common import APP_APPLE_ID, attempt, check, status_of


class Realtime(http.server.ThreadingHTTPServer):
    """The app's retention endpoint, as Apple's library would write it: each request verified with
    `verify_and_decode_realtime_request`, each answer the library's `RealtimeResponseBody`."""

    def __init__(self, verifier_):
        self.verifier = verifier_
        self.answer = None
        self.decoded = []
        super().__init__(("127.0.0.1", 0), RealtimeHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}/retention"


class RealtimeHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        try:
            self.server.decoded.append(self.server.verifier.verify_and_decode_realtime_request(body["signedPayload"]))
        except VerificationException as error:
            self.server.decoded.append(error)
            self.send_response(400)
            self.end_headers()
            return
        answer = json.dumps(_get_cattrs_converter(RealtimeResponseBody).unstructure(self.server.answer)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def api_client(sim, args, bundle, environment):
    key = sim("sim.apiKey")
    client = AppStoreServerAPIClient(key["privateKey"].encode(), key["keyId"], key["issuerId"], bundle, environment)
    client._base_url = args.api + ("" if environment == Environment.PRODUCTION else "/sandbox")  # the simulator, not Apple
    return client


def approved_message(sim, client, header="Before you go"):
    """A message uploaded with the library's client and approved by the simulated App Store's review."""
    message = uuid.uuid4()
    client.upload_message(message, UploadMessageRequestBody(header=header, body="Keep your progress and your coins."))
    sim("sim.reviewMessaging", identifier=str(message), state="APPROVED")
    return str(message)


def api_code(call):
    try:
        call()
        return None
    except APIException as error:
        return error.raw_api_error


def realtime_checks(sim, args, root, bundle, verifiers, purchases):
    """Retention Messaging: the simulator's signed realtime requests pass Apple's verifier, and what the simulator shows is
    the choice Apple's library wrote, when its message is approved and its offer signed with the developer's key."""
    client = api_client(sim, args, bundle, Environment.PRODUCTION)
    endpoint = Realtime(verifiers["production"])
    sim("sim.setRealtimeURL", environment="production", url=endpoint.url())
    sub = purchases[("production", "autoRenewable")]
    original = sub["originalTransactionId"]

    def cancel(locale="en-US"):
        return sim("sim.cancelIntent", appleId="judge-production@icloud", originalTransactionId=original, locale=locale)

    unreviewed = str(uuid.uuid4())
    client.upload_message(uuid.UUID(unreviewed), UploadMessageRequestBody(header="Wait", body="Not reviewed yet."))
    endpoint.answer = RealtimeResponseBody(message=Message(messageIdentifier=uuid.UUID(unreviewed)))
    shown = cancel()["shown"]
    check("realtime answer: a message still in review is not shown (the default is)", shown["kind"] == "default", str(shown))
    message = approved_message(sim, client)
    endpoint.answer = RealtimeResponseBody(message=Message(messageIdentifier=uuid.UUID(message)))
    sent = cancel()
    decoded = endpoint.decoded[-1] if endpoint.decoded else None
    check("realtime request: verify_and_decode_realtime_request accepts it (Production, appAppleId)",
          decoded is not None and not isinstance(decoded, Exception), repr(decoded))
    if decoded is not None and not isinstance(decoded, Exception):
        check("realtime request: its fields are the subscription's and the request's",
              decoded.originalTransactionId == original and decoded.productId == "sub.premium"
              and decoded.userLocale == "en-US" and str(decoded.requestIdentifier) == sent["requestIdentifier"]
              and decoded.appAppleId == APP_APPLE_ID and decoded.rawEnvironment == "Production")
    check("realtime answer: the library's message is what the customer was shown",
          sent["shown"] == {"kind": "message", "messageIdentifier": message}, str(sent["shown"]))
    switch = approved_message(sim, client, "Try the basic plan")
    endpoint.answer = RealtimeResponseBody(alternateProduct=AlternateProduct(messageIdentifier=uuid.UUID(switch), productId="sub.basic"))
    sent = cancel("de-DE")
    check("realtime answer: the library's alternate product is what the customer was shown",
          sent["shown"] == {"kind": "alternateProduct", "messageIdentifier": switch, "productId": "sub.basic"}, str(sent["shown"]))
    offer_answer_checks(sim, client, endpoint, bundle, original, cancel)
    check("realtime request: the Sandbox verifier refuses it (INVALID_ENVIRONMENT)",
          status_of(lambda: verifiers["sandbox"].verify_and_decode_realtime_request(sent["signedPayload"]))
          == VerificationStatus.INVALID_ENVIRONMENT)
    other = SignedDataVerifier([root], False, Environment.PRODUCTION, bundle, APP_APPLE_ID + 1)
    check("realtime request: another app's verifier refuses it (INVALID_APP_IDENTIFIER)",
          status_of(lambda: other.verify_and_decode_realtime_request(sent["signedPayload"])) == VerificationStatus.INVALID_APP_IDENTIFIER)
    sim("sim.setRealtimeURL", environment="production")
    sent = cancel()
    check("no realtime URL: the default message is shown", sent["shown"]["kind"] == "default", str(sent["shown"]))
    endpoint.shutdown()


def offer_answer_checks(sim, client, endpoint, bundle, original, cancel):
    """Promotional offers signed by the library's creators with the developer's offer key are shown; one signed with
    another key is not."""
    key = sim("sim.offerKey")
    pem = key["privateKey"].encode()
    message = approved_message(sim, client, "Stay for less")
    jws = PromotionalOfferV2SignatureCreator(pem, key["keyId"], key["issuerId"], bundle).create_signature(
        "sub.premium", "loyal", original)
    endpoint.answer = RealtimeResponseBody(
        promotionalOffer=PromotionalOffer(messageIdentifier=uuid.UUID(message), promotionalOfferSignatureV2=jws))
    shown = cancel()["shown"]
    check("realtime answer: a v2 offer signed by PromotionalOfferV2SignatureCreator is shown",
          shown == {"kind": "promotionalOffer", "messageIdentifier": message, "offerIdentifier": "loyal"}, str(shown))
    nonce, timestamp = uuid.uuid4(), int(time.time() * 1000)
    signature = PromotionalOfferSignatureCreator(pem, key["keyId"], bundle).create_signature("sub.premium", "loyal", "", nonce, timestamp)
    endpoint.answer = RealtimeResponseBody(promotionalOffer=PromotionalOffer(
        messageIdentifier=uuid.UUID(message), promotionalOfferSignatureV1=PromotionalOfferSignatureV1(
            encodedSignature=signature, productId="sub.premium", nonce=nonce, timestamp=timestamp, keyId=key["keyId"],
            offerIdentifier="loyal")))
    shown = cancel()["shown"]
    check("realtime answer: a v1 offer signed by PromotionalOfferSignatureCreator is shown",
          shown.get("kind") == "promotionalOffer" and shown.get("offerIdentifier") == "loyal", str(shown))
    stranger = sim("sim.apiKey")["privateKey"].encode()  # a real key, but not the offer key
    forged = PromotionalOfferV2SignatureCreator(stranger, key["keyId"], key["issuerId"], bundle).create_signature(
        "sub.premium", "loyal", original)
    endpoint.answer = RealtimeResponseBody(
        promotionalOffer=PromotionalOffer(messageIdentifier=uuid.UUID(message), promotionalOfferSignatureV2=forged))
    shown = cancel()["shown"]
    check("realtime answer: an offer signed with another key is not shown", shown["kind"] == "default", str(shown))


def png(width, height, alpha=False):
    """A PNG image as Apple takes it (8-bit grey), or with an alpha channel (which Apple refuses)."""
    color, channels = (6, 4) if alpha else (0, 1)
    raw = b"".join(b"\x00" + bytes(width * channels) for _ in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, color, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def messaging_checks(sim, args, bundle, verifiers, purchases):
    """The management API with the library's client: Apple's limits and refusals, review states, the realtime URL and the
    performance test against an endpoint written with the library."""
    client = api_client(sim, args, bundle, Environment.PRODUCTION)
    image = uuid.uuid4()
    attempt("upload_image: a 3840 x 160 PNG", lambda: client.upload_image(image, png(3840, 160), ImageSize.FULL_SIZE))
    listed = client.get_image_list().imageIdentifiers or []
    check("get_image_list: the image, PENDING, FULL_SIZE",
          [(i.imageIdentifier, i.rawImageState, i.rawImageSize) for i in listed] == [(image, "PENDING", "FULL_SIZE")], str(listed))
    check("upload_image: a PNG with transparency is refused (INVALID_IMAGE 4000161)",
          api_code(lambda: client.upload_image(uuid.uuid4(), png(3840, 160, alpha=True), ImageSize.FULL_SIZE)) == 4000161)
    check("upload_image: the same identifier again is refused (IMAGE_ALREADY_EXISTS 4090000)",
          api_code(lambda: client.upload_image(image, png(3840, 160), ImageSize.FULL_SIZE)) == 4090000)
    message = uuid.uuid4()
    body = UploadMessageRequestBody(header="Stay", body="Your castle waits.", image=UploadMessageImage(imageIdentifier=image, altText="A castle"))
    attempt("upload_message with its image", lambda: client.upload_message(message, body))
    check("upload_message: the same identifier again is refused (MESSAGE_ALREADY_EXISTS 4090001)",
          api_code(lambda: client.upload_message(message, body)) == 4090001)
    states = {m.messageIdentifier: m.rawMessageState for m in client.get_message_list().messageIdentifiers or []}
    check("get_message_list: the message, PENDING", states.get(message) == "PENDING", str(states))
    default = DefaultConfigurationRequest(messageIdentifier=message)
    check("configure_default_message: a message in review is refused (MESSAGE_NOT_APPROVED 4030017)",
          api_code(lambda: client.configure_default_message("sub.premium", "en-US", default)) == 4030017)
    sim("sim.reviewMessaging", identifier=str(message), state="APPROVED")
    check("configure_default_message: an image in review is refused (IMAGE_NOT_APPROVED 4030018)",
          api_code(lambda: client.configure_default_message("sub.premium", "en-US", default)) == 4030018)
    sim("sim.reviewMessaging", identifier=str(image), state="APPROVED")
    attempt("configure_default_message once approved", lambda: client.configure_default_message("sub.premium", "en-US", default))
    check("get_default_message: the message", client.get_default_message("sub.premium", "en-US").messageIdentifier == message)
    check("delete_image: an image a message uses is refused (IMAGE_IN_USE 4030019)",
          api_code(lambda: client.delete_image(image)) == 4030019)
    check("get_default_message: none for another locale (DEFAULT_MESSAGE_NOT_FOUND 4040020)",
          api_code(lambda: client.get_default_message("sub.premium", "fr-FR")) == 4040020)
    check("configure_realtime_url: Production before a passed performance test is refused (FORBIDDEN_NO_PASSING_TEST 4030026)",
          api_code(lambda: client.configure_realtime_url(RealtimeUrlRequest(realtimeURL="https://example.com/retention"))) == 4030026)
    performance_checks(sim, args, bundle, verifiers, purchases, client)


def performance_checks(sim, args, bundle, verifiers, purchases, production):
    sandbox = api_client(sim, args, bundle, Environment.SANDBOX)
    endpoint = Realtime(verifiers["sandbox"])
    endpoint.answer = RealtimeResponseBody(message=Message(messageIdentifier=uuid.UUID(approved_message(sim, sandbox))))
    check("get_realtime_url: none yet (REALTIME_URL_NOT_FOUND 4040021)", api_code(sandbox.get_realtime_url) == 4040021)
    attempt("configure_realtime_url (Sandbox)", lambda: sandbox.configure_realtime_url(RealtimeUrlRequest(realtimeURL=endpoint.url())))
    check("get_realtime_url: the URL", sandbox.get_realtime_url().realtimeURL == endpoint.url())
    sub = purchases[("sandbox", "autoRenewable")]
    started = attempt("initiate_performance_test", lambda: sandbox.initiate_performance_test(
        PerformanceTestRequest(originalTransactionId=sub["originalTransactionId"])))
    if started is not None:
        check("initiate_performance_test: Apple's config and a request id",
              started.config is not None and started.config.responseTimeThreshold and started.requestId)
        result = sandbox.get_performance_test_results(started.requestId)
        for _ in range(600):  # Apple's API is polled for the result, as every client of it does
            if result.rawResult != "PENDING":
                break
            time.sleep(0.05)
            result = sandbox.get_performance_test_results(started.requestId)
        verified = [d for d in endpoint.decoded if not isinstance(d, Exception)]
        check("performance test: PASS, every request verified by verify_and_decode_realtime_request",
              result.rawResult == "PASS" and result.successRate >= started.config.successRateThreshold
              and len(verified) == started.config.totalRequests,
              f"{result.rawResult} {result.successRate} {len(verified)}")
        check("performance test: its response times", result.responseTimes is not None and result.responseTimes.p99 is not None)
        attempt("configure_realtime_url (Production) after the passed test", lambda: production.configure_realtime_url(
            RealtimeUrlRequest(realtimeURL=endpoint.url())))
        production.delete_realtime_url()
    check("get_performance_test_results: an unknown test (PERFORMANCE_TEST_RUN_NOT_FOUND 4040018)",
          api_code(lambda: sandbox.get_performance_test_results(str(uuid.uuid4()))) == 4040018)
    sandbox.delete_realtime_url()
    endpoint.shutdown()
