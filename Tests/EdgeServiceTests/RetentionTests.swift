import AppStoreServerAPI
import AsyncHTTPClient
import Foundation
import IAPProtocol
import JSONRPC
import NIOCore
import RPCTransport
import Receipts
import SuiteTestSupport
import Testing
import X509

/// Apple's Retention Messaging end to end: the simulated App Store sends its signed realtime request for a customer about to
/// cancel to the edge's `POST /v1/retention/appstore`, and what it shows is what the catalog's rules chose from fulfillment's
/// records.
@Suite struct RetentionTests {
    static let french = "11111111-1111-4111-8111-111111111111", offer = "22222222-2222-4222-8222-222222222222"
    static let downgrade = "33333333-3333-4333-8333-333333333333", fallback = "44444444-4444-4444-8444-444444444444"
    static let veteran = "55555555-5555-4555-8555-555555555555"

    static var rules: RetentionRules {
        RetentionRules(
            choices: [
                .init(id: "french", kind: .message, messageIdentifier: french, locales: ["fr"]),
                // Only for subscribers of a year or more: a new subscriber meets none of it.
                .init(id: "veteran", kind: .message, messageIdentifier: veteran, when: .init(minTenureDays: 365)),
                .init(id: "stay", kind: .promotionalOffer, messageIdentifier: offer, offerId: "loyal", when: .init(maxRefunds: 0)),
                .init(
                    id: "downgrade", kind: .alternateProduct, messageIdentifier: downgrade, alternateProductId: "sub.basic",
                    billingPlanType: "MONTHLY"),
            ], defaultMessageIdentifier: fallback)
    }

    /// The App Store Server API client of the suite's app, aimed at the simulated App Store.
    static func apiClient(_ suite: SuiteFixture) async throws -> AppStoreServerAPIClient {
        let key = try await suite.simulator.call(SimAPIKey.self, EmptyParams())
        let anchors = try await suite.simulator.call(SimTrustAnchor.self, EmptyParams())
        var config = AppStoreServerAPIClient.Configuration()
        config.productionURL = "http://127.0.0.1:\(suite.simHTTPPort)"
        config.sandboxURL = config.productionURL + "/sandbox"
        return AppStoreServerAPIClient(
            credentials: try AppStoreAPICredentials(
                keyId: key.keyId, issuerId: key.issuerId, bundleId: SuiteFixture.bundleId, privateKeyPEM: key.privateKey),
            verifier: SignedPayloadVerifier(roots: [try Certificate(derEncoded: Array(Data(base64Encoded: anchors.jwsRoot)!))]), configuration: config
        )
    }

    /// Uploads the rules' messages to the simulated App Store and has Apple's review approve them (it shows no other).
    static func uploadApproved(_ suite: SuiteFixture, _ environment: AppleEnvironment = .production, except: Set<String> = []) async throws {
        let client = try await apiClient(suite)
        for id in [french, offer, downgrade, fallback, veteran] {
            try await client.uploadMessage(
                environment, messageIdentifier: id, message: .init(header: "Before you go", body: "A message \(id.prefix(4))"))
            if !except.contains(id) { _ = try await suite.simulator.call(SimReviewMessaging.self, .init(identifier: id, state: "APPROVED")) }
        }
    }

    /// Standard base64 of a JWS part (base64url without padding).
    static func base64(_ part: Substring) -> String {
        var text = part.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        return text
    }

    static func cancelIntent(_ suite: SuiteFixture, _ appleId: String, _ original: String, _ locale: String) async throws -> SimCancelIntent.Result {
        try await suite.simulator.call(SimCancelIntent.self, .init(appleId: appleId, originalTransactionId: original, locale: locale))
    }

    @Test func aSubscriberAboutToCancelIsShownTheRuleThatFitsAndAnOfferOnlyOnce() async throws {
        try await EdgeFixture.withContentEdge { suite, base in
            try await suite.catalog.call(
                CatalogSetRetention.self, .init(adminToken: SuiteFixture.adminToken, productId: "sub.premium", retention: Self.rules))
            try await suite.simulator.call(SimSetRealtimeURL.self, .init(environment: .production, url: base + "/v1/retention/appstore"))
            let user = try await suite.register("leaver")
            let bought = try await suite.buy("apple-leaver", "sub.premium", appAccountToken: user.appAccountToken)
            try await Self.uploadApproved(suite)  // after the first sale: the App Store knows the app by its sales
            _ = try await suite.redeem(user.session, signed: [bought.signedTransaction])
            let original = bought.originalTransactionId

            let french = try await Self.cancelIntent(suite, "apple-leaver", original, "fr-CA")
            #expect(french.shown == RetentionShown(kind: "message", messageIdentifier: Self.french))
            // The offer, signed: the simulated App Store reads its offer id from the JWS.
            let first = try await Self.cancelIntent(suite, "apple-leaver", original, "en-US")
            #expect(first.shown == RetentionShown(kind: "promotionalOffer", messageIdentifier: Self.offer, offerIdentifier: "loyal"))
            // Asked again, the same customer is not offered the same discount twice: the next rule.
            let second = try await Self.cancelIntent(suite, "apple-leaver", original, "en-US")
            #expect(second.shown == RetentionShown(kind: "alternateProduct", messageIdentifier: Self.downgrade, productId: "sub.basic"))
            #expect(try await suite.count("SELECT COUNT(*) FROM retentionAnswer WHERE offerId = 'loyal'") == 1)

            // Apple repeating a request gets the answer recorded for it, and nothing new is recorded.
            let answers = try await suite.count("SELECT COUNT(*) FROM retentionAnswer")
            let again = try await EdgeTests.post(base + "/v1/retention/appstore", #"{"signedPayload":"\#(first.signedPayload)"}"#)
            #expect(again.status == 200 && again.body.contains(Self.offer) && again.body.contains("promotionalOfferSignatureV2"), "\(again)")
            // A forged request (a well-formed payload, a new request id, under Apple's header and signature) is refused and
            // changes nothing.
            let parts = second.signedPayload.split(separator: ".")
            let payloadBytes = try #require(Data(base64Encoded: Self.base64(parts[1])))
            var claims = try #require(try JSONSerialization.jsonObject(with: payloadBytes) as? [String: Any])
            claims["requestIdentifier"] = UUID().uuidString.lowercased()
            let forgedPayload = try JSONSerialization.data(withJSONObject: claims).base64EncodedString()
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            let forged = try await EdgeTests.post(
                base + "/v1/retention/appstore", #"{"signedPayload":"\#(parts[0]).\#(forgedPayload).\#(parts[2])"}"#)
            #expect(forged.status == 400, "\(forged)")
            #expect(try await EdgeTests.post(base + "/v1/retention/appstore", #"{"signed":"x"}"#).status == 400)
            // Apple's request for another app of the App Store (its own app Apple ID) is refused: the edge answers 400.
            let foreign = try await suite.simulator.call(
                SimCancelIntent.self, .init(appleId: "apple-leaver", originalTransactionId: original, locale: "en-US", appAppleId: 42))
            #expect(foreign.shown.kind == "default" && foreign.shown.reason == "HTTP 400", "\(foreign.shown)")
            #expect(try await suite.count("SELECT COUNT(*) FROM retentionAnswer") == answers)
        }
    }

    @Test func aSubscriberWhoWasRefundedOrIsUnknownHereGetsNoOfferAndTheDefaultWhenNothingFits() async throws {
        try await EdgeFixture.withContentEdge { suite, base in
            var rules = Self.rules
            rules.choices.removeAll { $0.id == "downgrade" }
            try await suite.catalog.call(
                CatalogSetRetention.self, .init(adminToken: SuiteFixture.adminToken, productId: "sub.premium", retention: rules))
            try await suite.simulator.call(SimSetRealtimeURL.self, .init(environment: .production, url: base + "/v1/retention/appstore"))
            // The fallback is left in review: Apple then shows the default it has (none configured here), not the answer.
            let first = try await suite.buy("apple-stranger-0", "sub.premium")
            try await Self.uploadApproved(suite, except: [Self.fallback])
            let pending = try await Self.cancelIntent(suite, "apple-stranger-0", first.originalTransactionId, "en-US")
            #expect(pending.shown.kind == "default" && pending.shown.reason?.contains("not approved") == true, "\(pending.shown)")
            _ = try await suite.simulator.call(SimReviewMessaging.self, .init(identifier: Self.fallback, state: "APPROVED"))
            // Bought at Apple, never redeemed here: no condition holds (`maxRefunds` included), so the default.
            let stranger = try await suite.buy("apple-stranger", "sub.premium")
            let unknown = try await Self.cancelIntent(suite, "apple-stranger", stranger.originalTransactionId, "en-US")
            #expect(unknown.shown == RetentionShown(kind: "message", messageIdentifier: Self.fallback))
            // A subscriber with a refund: the offer's `maxRefunds: 0` excludes them.
            let user = try await suite.register("refunded")
            let coins = try await suite.buy("apple-refunded", "coins.100", appAccountToken: user.appAccountToken)
            let sub = try await suite.buy("apple-refunded", "sub.premium", appAccountToken: user.appAccountToken)
            _ = try await suite.redeem(user.session, signed: [coins.signedTransaction, sub.signedTransaction])
            let refund = try await suite.simulator.call(SimRefund.self, .init(appleId: "apple-refunded", transactionId: coins.transactionId))
            let applied = try await suite.fulfillment.call(
                FulfillmentApplyNotification.self, .init(signedPayload: try #require(refund.signedPayload), internalToken: SuiteFixture.internalToken)
            )
            #expect(applied.applied)
            #expect(try await suite.count("SELECT COUNT(*) FROM processedTransaction WHERE revokeReason = 'refunded'") == 1)
            let shown = try await Self.cancelIntent(suite, "apple-refunded", sub.originalTransactionId, "en-US")
            #expect(shown.shown == RetentionShown(kind: "message", messageIdentifier: Self.fallback))
        }
    }

    @Test func aCustomerWhoRedeemedTheOfferWithAPurchaseIsNotOfferedItAgain() async throws {
        try await EdgeFixture.withContentEdge { suite, base in
            try await suite.catalog.call(
                CatalogSetRetention.self, .init(adminToken: SuiteFixture.adminToken, productId: "sub.premium", retention: Self.rules))
            try await suite.simulator.call(SimSetRealtimeURL.self, .init(environment: .production, url: base + "/v1/retention/appstore"))
            // The offer signed for the account by the suite and redeemed with the purchase at the (simulated) App Store.
            let user = try await suite.register("redeemer")
            // Known to this server as an Apple customer first (offers are signed for known customers only).
            let coins = try await suite.buy("apple-redeemer", "coins.100", appAccountToken: user.appAccountToken)
            _ = try await suite.redeem(user.session, signed: [coins.signedTransaction])
            let signed = try await suite.fulfillment.call(
                FulfillmentSignOffer.self, .init(session: user.session, productId: "sub.premium", offerId: "loyal"))
            let bought = try await suite.simulator.call(
                SimPurchase.self,
                .init(
                    appleId: "apple-redeemer", bundleId: SuiteFixture.bundleId, productId: "sub.premium", productType: .autoRenewable,
                    appAccountToken: user.appAccountToken, offerJWS: signed.jws))
            _ = try await suite.redeem(user.session, signed: [bought.signedTransaction])
            #expect(try await suite.count("SELECT COUNT(*) FROM processedTransaction WHERE offerIdentifier = 'loyal'") == 1)
            try await Self.uploadApproved(suite)
            let shown = try await Self.cancelIntent(suite, "apple-redeemer", bought.originalTransactionId, "en-US")
            #expect(shown.shown == RetentionShown(kind: "alternateProduct", messageIdentifier: Self.downgrade, productId: "sub.basic"))
        }
    }

    /// Apple's performance test of the endpoint, started and read with the suite's client: 50 requests, 10 at a time, all
    /// answered (the threshold is a patient one here: latency is the benchmark's to measure), and then the Production URL
    /// may be configured.
    @Test func applesPerformanceTestOfTheEndpointPassesAndThenUnlocksTheProductionURL() async throws {
        try await EdgeFixture.withContentEdge { suite, base in
            try await suite.catalog.call(
                CatalogSetRetention.self, .init(adminToken: SuiteFixture.adminToken, productId: "sub.premium", retention: Self.rules))
            let sub = try await suite.buy("apple-tester", "sub.premium", environment: .sandbox)
            try await Self.uploadApproved(suite, .sandbox)
            let client = try await Self.apiClient(suite)
            let url = base + "/v1/retention/appstore"
            try await client.configureRealtimeURL(.sandbox, url: url)
            // A Sandbox subscription never verified here may be another developer's app selling the same product id (the
            // Sandbox names no app Apple ID): nothing is chosen and nothing recorded.
            let stranger = try await Self.cancelIntent(suite, "apple-tester", sub.originalTransactionId, "en-US")
            #expect(stranger.shown.kind == "default", "\(stranger.shown)")
            #expect(try await suite.count("SELECT COUNT(*) FROM retentionAnswer") == 0)
            let tester = try await suite.register("tester")
            _ = try await suite.redeem(tester.session, signed: [sub.signedTransaction])
            let (requestId, config) = try await client.initiatePerformanceTest(originalTransactionId: sub.originalTransactionId)
            #expect(config["totalRequests"]?.intValue == 50 && config["maxConcurrentRequests"]?.intValue == 10)
            // Apple's API is polled for the result, as a client of it must.
            var result = try await client.performanceTestResult(requestId: requestId)
            for _ in 0..<600 where result["result"]?.stringValue == "PENDING" {
                try await Task.sleep(for: .milliseconds(50))
                result = try await client.performanceTestResult(requestId: requestId)
            }
            #expect(result["result"]?.stringValue == "PASS", "\(result)")
            #expect(result["successRate"]?.intValue == 100 && result["target"]?.stringValue == url, "\(result)")
            #expect(result["responseTimes"]?["p99"]?.intValue != nil, "\(result)")
            try await client.configureRealtimeURL(.production, url: url)
            #expect(try await client.realtimeURL(.production) == url)
            // Every request of the test was answered and recorded once.
            #expect(try await suite.count("SELECT COUNT(*) FROM retentionAnswer WHERE environment = 'Sandbox'") == 50)
            // Ten at a time for one subscriber, the offer went out once; the others got the next rule.
            #expect(try await suite.count("SELECT COUNT(*) FROM retentionAnswer WHERE environment = 'Sandbox' AND offerId = 'loyal'") == 1)
        }
    }
}
