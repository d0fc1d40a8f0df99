import Foundation
import IAPProtocol
import PlayDeveloperAPI
import Testing

@testable import VerificationService

/// The pure rules of Google Play's pushes: the OIDC token's claims, when Google's keys are fetched again, and how a
/// Pub/Sub push body is read. (The signatures and the whole path are judged against the Play simulator's real pushes:
/// GooglePlayNotificationTests.)
struct PlayPushRulesTests {
    let rules = PlayPushTokenRules(audience: "https://iap.example.com/push", email: "push@p.iam.gserviceaccount.com")
    let now: Int64 = 1_800_000_000

    func claims(_ change: (inout [String: Any]) -> Void = { _ in }) -> [String: Any] {
        var c: [String: Any] = [
            "iss": "https://accounts.google.com", "aud": "https://iap.example.com/push", "email": "push@p.iam.gserviceaccount.com",
            "email_verified": true, "iat": NSNumber(value: now - 10), "exp": NSNumber(value: now + 3_590),
        ]
        change(&c)
        return c
    }

    @Test func googlesClaimsPassAndEachWrongOneIsRefusedForItsReason() {
        #expect(rules.check(claims(), nowSeconds: now) == nil)
        #expect(rules.check(claims { $0["iss"] = "accounts.google.com" }, nowSeconds: now) == nil)
        #expect(rules.check(claims { $0["iss"] = "https://evil.example.com" }, nowSeconds: now) == .wrongIssuer)
        #expect(rules.check(claims { $0["aud"] = "https://iap.example.com/other" }, nowSeconds: now) == .wrongAudience)
        #expect(rules.check(claims { $0["email"] = "other@p.iam.gserviceaccount.com" }, nowSeconds: now) == .wrongEmail)
        #expect(rules.check(claims { $0["email_verified"] = false }, nowSeconds: now) == .wrongEmail)
        #expect(rules.check(claims { $0["email_verified"] = nil }, nowSeconds: now) == .wrongEmail)
        #expect(rules.check(claims { $0["exp"] = NSNumber(value: now - 61) }, nowSeconds: now) == .expired)
        #expect(rules.check(claims { $0["iat"] = NSNumber(value: now + 61) }, nowSeconds: now) == .expired)
        #expect(rules.check(claims { $0["iat"] = nil }, nowSeconds: now) == .expired)
        // A token issued two hours ago is refused even if it claims to expire later (push tokens live an hour).
        #expect(
            rules.check(
                claims {
                    $0["iat"] = NSNumber(value: now - 7_200); $0["exp"] = NSNumber(value: now + 7_200)
                }, nowSeconds: now) == .expired)
        // Within the minute of clock difference tolerated.
        #expect(rules.check(claims { $0["exp"] = NSNumber(value: now - 30) }, nowSeconds: now) == nil)
    }

    @Test func googlesKeysAreFetchedWhenTheirCacheLifeEndsOrANewKeyAppearsButNotForEveryMadeUpKeyId() {
        let policy = PlayCertsCachePolicy()
        #expect(policy.shouldFetch(knownKey: false, fetchedAtMs: nil, expiresAtMs: nil, nowMs: 0))
        #expect(!policy.shouldFetch(knownKey: true, fetchedAtMs: 0, expiresAtMs: 3_600_000, nowMs: 1_000))
        #expect(policy.shouldFetch(knownKey: true, fetchedAtMs: 0, expiresAtMs: 3_600_000, nowMs: 3_600_000))
        // An unknown key id: fetched again (a rotation), but at most once per 30 seconds.
        #expect(!policy.shouldFetch(knownKey: false, fetchedAtMs: 0, expiresAtMs: 3_600_000, nowMs: 29_999))
        #expect(policy.shouldFetch(knownKey: false, fetchedAtMs: 0, expiresAtMs: 3_600_000, nowMs: 30_000))
        #expect(policy.maxAgeSeconds(cacheControl: "public, max-age=19965, must-revalidate, no-transform") == 19_965)
        #expect(policy.maxAgeSeconds(cacheControl: "max-age=1") == 60)
        #expect(policy.maxAgeSeconds(cacheControl: "max-age=9999999") == 86_400)
        #expect(policy.maxAgeSeconds(cacheControl: nil) == 3_600)
    }

    static func body(_ notification: String, message: String = #""messageId":"136969346945""#) -> String {
        let data = Data(notification.utf8).base64EncodedString()
        return
            #"{"message":{"attributes":{},"data":"\#(data)",\#(message),"publishTime":"2021-02-26T19:13:55.749Z"},"subscription":"projects/p/subscriptions/s"}"#
    }

    @Test func googlesDocumentedNotificationsAreReadAndAnythingElseRefused() throws {
        let sub = try PlayPushReading.read(
            Self.body(
                #"{"version":"1.0","packageName":"com.some.thing","eventTimeMillis":"1503349566168","subscriptionNotification":{"version":"1.0","notificationType":4,"purchaseToken":"PURCHASE_TOKEN"}}"#
            ))
        #expect(sub.messageId == "136969346945" && sub.packageName == "com.some.thing" && sub.eventTimeMs == 1_503_349_566_168)
        #expect(sub.kind == .subscription && sub.notificationType == 4 && sub.purchaseToken == "PURCHASE_TOKEN" && sub.productId == nil)
        #expect(sub.publishTimeMs == 1_614_366_835_749)
        let voided = try PlayPushReading.read(
            Self.body(
                #"{"version":"1.0","packageName":"com.some.app","eventTimeMillis":1503349566168,"voidedPurchaseNotification":{"purchaseToken":"T","orderId":"GS.0000-0000-0000","productType":2,"refundType":1}}"#,
                message: #""message_id":"7""#))
        #expect(voided.kind == .voidedPurchase && voided.orderId == "GS.0000-0000-0000" && voided.productType == 2 && voided.refundType == 1)
        #expect(voided.messageId == "7" && voided.eventTimeMs == 1_503_349_566_168)
        let one = try PlayPushReading.read(
            Self.body(
                #"{"version":"1.0","packageName":"p","oneTimeProductNotification":{"version":"1.0","notificationType":1,"purchaseToken":"T","sku":"sword_001"}}"#
            ))
        #expect(one.kind == .oneTimeProduct && one.productId == "sword_001")
        #expect(try PlayPushReading.read(Self.body(#"{"version":"1.0","packageName":"p","testNotification":{"version":"1.0"}}"#)).kind == .test)
        for refused in [
            "{}", #"{"message":{"data":"e30="}}"#, Self.body(#"{"version":"1.0"}"#),
            Self.body(#"{"packageName":"p","subscriptionNotification":{"notificationType":4}}"#),
            Self.body(#"{"packageName":"p"}"#, message: #""messageId":"with space""#),
            Self.body(#"{"packageName":"p","testNotification":{}}"#, message: #""messageId":"voided:GPA.1""#),
        ] {
            #expect(throws: (any Error).self) { try PlayPushReading.read(refused) }
        }
    }
}

/// Google's `google-datetime` read by hand, against Foundation's reading of the same text.
@Suite struct GoogleDateTimeTests {
    @Test func readsWhatFoundationReadsAndRefusesWhatIsNotRFC3339() {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            // 1900 .. 2200, any millisecond.
            let ms = Int64.random(in: -2_208_988_800_000...7_258_118_400_000, using: &rng)
            let text = formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
            #expect(GoogleDateTime.milliseconds(text) == ms, "\(text)")
        }
        #expect(GoogleDateTime.milliseconds("2026-11-27T13:58:01Z") == 1_795_787_881_000)
        #expect(GoogleDateTime.milliseconds("2026-11-27T13:58:01.123456789Z") == 1_795_787_881_123)
        #expect(GoogleDateTime.milliseconds("2026-11-27T13:58:01.5Z") == 1_795_787_881_500)
        #expect(GoogleDateTime.milliseconds("2026-11-27T14:58:01+01:00") == 1_795_787_881_000)
        #expect(GoogleDateTime.milliseconds("2024-02-29T00:00:00Z") == 1_709_164_800_000)
        for bad in [
            "", "2026-11-27", "2026-11-27T13:58:01", "2026-13-01T00:00:00Z", "2025-02-29T00:00:00Z", "2026-11-27T24:00:00Z",
            "2026-11-27T13:58:01.Z", "2026-11-27T13:58:01.1234567890Z", "2026-11-27T13:58:01Zjunk", "2026-11-27 13:58:01Z", "１０２６-11-27T13:58:01Z",
            "2026-11-27T13:58:01+0100",
        ] {
            #expect(GoogleDateTime.milliseconds(bad) == nil, "\(bad)")
        }
    }
}
