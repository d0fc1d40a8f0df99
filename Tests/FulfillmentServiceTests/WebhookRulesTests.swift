import Foundation
import FulfillmentService
import IAPProtocol
import Testing

/// The pure rules behind webhooks and the feed: which addresses a webhook may reach, when a failed delivery is tried
/// again, what a cursor is, what Standard Webhooks' signature is.
@Suite struct WebhookRulesTests {
    @Test(arguments: [
        "127.0.0.1", "10.0.0.1", "10.255.255.255", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254", "100.64.0.1",
        "0.0.0.0", "224.0.0.1", "255.255.255.255", "198.18.0.1", "::1", "::", "fe80::1", "fc00::1", "fd12:3456::1", "ff02::1",
        "::ffff:127.0.0.1", "::ffff:10.1.2.3", "64:ff9b::a01:203", "2002:a00:1::1", "64:ff9b:1::1", "fec0::1", "::ffff:0:7f00:1",
        "2001:db8::1",
    ])
    func privateLoopbackAndLinkLocalAddressesAreRefused(address: String) {
        #expect(WebhookAddressPolicy.isPrivate(address) == true, "\(address)")
    }

    @Test(arguments: ["93.184.216.34", "8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"])
    func publicAddressesAreAllowed(address: String) {
        #expect(WebhookAddressPolicy.isPrivate(address) == false, "\(address)")
    }

    @Test func namesAreNotAddresses() {
        #expect(WebhookAddressPolicy.isPrivate("example.com") == nil && WebhookAddressPolicy.isPrivate("localhost") == nil)
    }

    @Test func urlsAreHttpWithAHostAndNoCredentials() {
        #expect(WebhookURL("https://hooks.example.com/iap")?.port == 443 && WebhookURL("http://[::1]:8080/x")?.host == "::1")
        for bad in ["ftp://example.com", "https://user:pw@example.com/", "https:///x", "example.com/x", "https://example.com/#frag"] {
            #expect(WebhookURL(bad) == nil, "\(bad)")
        }
    }

    @Test func retriesComeWithinASecondThenDoubleWithJitterUpToAnHour() {
        for jitter in [0.0, 0.5, 1.0] {
            let first = WebhookRetry.nextAttemptAtMs(failures: 1, nowMs: 0, jitter: jitter)
            #expect((500...1_000).contains(first))
            let tenth = WebhookRetry.nextAttemptAtMs(failures: 10, nowMs: 0, jitter: jitter)
            #expect((256_000...512_000).contains(tenth))
            #expect(WebhookRetry.nextAttemptAtMs(failures: 40, nowMs: 0, jitter: jitter) <= 3_600_000)
            #expect(WebhookRetry.nextAttemptAtMs(failures: 40, nowMs: 0, jitter: jitter) >= 1_800_000)
        }
        // Three days of attempts an hour apart at most: at least 72 of them before an endpoint gives up.
        var now: Int64 = 0, failures = 0
        while now < 3 * 86_400_000 {
            failures += 1
            now = WebhookRetry.nextAttemptAtMs(failures: failures, nowMs: now, jitter: 1)
        }
        #expect(failures >= 72)
    }

    @Test func cursorsRoundTripAndRefuseWhatIsNotOne() {
        #expect(EventPosition(cursor: "0") == .start && EventPosition(cursor: "42")?.cursor == "42")
        #expect(EventPosition(cursor: "981.42") == EventPosition(txOrder: 981, id: 42) && EventPosition(cursor: "981.42")?.cursor == "981.42")
        for bad in ["", "-1", "1.2.3", "a", "1.", ".1", "1.-2"] { #expect(EventPosition(cursor: bad) == nil, "\(bad)") }
        #expect(EventPosition(txOrder: 5, id: 1) > EventPosition(txOrder: 4, id: 99))
    }

    /// The reference library (`standardwebhooks` 1.1.0, `Webhook(secret).sign`) signs this example the same way.
    @Test func theSignatureIsStandardWebhooks() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
        let body = Array(#"{"test": 2432232314}"#.utf8)
        let signature = WebhookSender.signatures(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: "1614265330", body: body, secrets: [secret])
        #expect(signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        let two = WebhookSender.signatures(id: "m", timestamp: "1", body: body, secrets: [secret, WebhookSender.newSecret()])
        #expect(two.split(separator: " ").count == 2 && two.hasPrefix("v1,"))
    }
}
