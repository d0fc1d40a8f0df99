import Crypto
import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import Receipts
import SuiteTestSupport
import Testing

/// Promotional offers through the whole suite over TCP: fulfillment decides eligibility from its records and
/// signs with the subscription-offer key; the simulated App Store checks the signature as Apple does (key,
/// app, product, customer, 24 hours, nonce once) and records the offer in the transaction. Both signature
/// forms are also verified by Python's `cryptography`, independently of our code.
@Suite struct SubscriptionOfferTests {
    static let day: Int64 = 86_400_000

    static func sign(_ suite: SuiteFixture, _ session: String, _ offerId: String, product: String = "sub.premium") async throws
        -> FulfillmentSignOffer.Result
    {
        try await suite.fulfillment.call(FulfillmentSignOffer.self, .init(session: session, productId: product, offerId: offerId))
    }

    static func buy(
        _ suite: SuiteFixture, _ appleId: String, token: String, product: String = "sub.premium", offer: SimPromotionalOffer? = nil,
        jws: String? = nil
    ) async throws -> SimPurchase.Result {
        try await suite.simulator.call(
            SimPurchase.self,
            .init(
                appleId: appleId, bundleId: SuiteFixture.bundleId, productId: product, productType: .autoRenewable, appAccountToken: token,
                offer: offer, offerJWS: jws))
    }

    static func offer(_ s: FulfillmentSignOffer.Result) -> SimPromotionalOffer {
        .init(offerIdentifier: s.offerId, keyIdentifier: s.keyId, nonce: s.nonce, timestamp: s.timestamp, signature: s.signature)
    }

    /// A coin purchase redeemed on the account: its Apple customer becomes known here (offers read their history).
    @discardableResult
    static func knownCustomer(_ suite: SuiteFixture, _ account: (session: String, accountId: String, appAccountToken: String), _ appleId: String)
        async throws -> SimPurchase.Result
    {
        let coins = try await suite.buy(appleId, "coins.100", appAccountToken: account.appAccountToken)
        _ = try await suite.redeem(account.session, signed: [coins.signedTransaction])
        return coins
    }

    static func claims(_ jws: String) throws -> JSONValue { try JSONValue(parsing: try #require(SignedPayloadVerifier.unverifiedPayload(jws))) }

    static func eligibility(_ suite: SuiteFixture, _ session: String) async throws -> [String: Bool] {
        let answer = try await suite.fulfillment.call(FulfillmentOfferEligibility.self, .init(session: session, productId: "sub.premium"))
        return Dictionary(uniqueKeysWithValues: answer.offers.map { ($0.offerId, $0.eligible) })
    }

    @Test func aLapsedSubscriberGetsAWinBackOfferTheAppStoreAcceptsOnce() async throws {
        try await SuiteFixture.with { suite in
            let amy = try await suite.register("amy")
            let first = try await Self.buy(suite, "amy@icloud", token: amy.appAccountToken)
            _ = try await suite.redeem(amy.session, signed: [first.signedTransaction])
            #expect(try await Self.eligibility(suite, amy.session) == ["winback": false, "welcome": false, "loyal": true])
            let refused = await rpcError { try await Self.sign(suite, amy.session, "winback") }
            #expect(refused?.knownCode == .forbidden && refused?.reason == "notEligible")
            #expect(refused?.message.contains("subscribed now") == true)
            // Auto-renew off, the period ends: lapsed.
            _ = try await suite.simulator.call(
                SimSetAutoRenew.self, .init(appleId: "amy@icloud", transactionId: first.transactionId, enabled: false))
            suite.clock.advance(ms: 31 * Self.day)
            _ = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 31 * 86_400))
            #expect(try await Self.eligibility(suite, amy.session) == ["winback": true, "welcome": false, "loyal": true])
            let signed = try await Self.sign(suite, amy.session, "winback")
            #expect(signed.appAccountToken == amy.appAccountToken.lowercased())
            let back = try await Self.buy(suite, "amy@icloud", token: amy.appAccountToken, offer: Self.offer(signed))
            let payload = try #require(SignedPayloadVerifier.unverifiedPayload(back.signedTransaction))
            let transaction = try JSONValue(parsing: payload)
            #expect(transaction["offerType"]?.intValue == 2 && transaction["offerIdentifier"]?.stringValue == "winback")
            #expect(try await suite.redeem(amy.session, signed: [back.signedTransaction]).results.map(\.outcome) == [.granted])
            // The same signature again: the App Store has seen its nonce.
            let replay = await rpcError { try await Self.buy(suite, "amy@icloud", token: amy.appAccountToken, offer: Self.offer(signed)) }
            #expect(replay?.reason == "offerNonceReused")
        }
    }

    /// Offers are for the Apple customer: a returning subscriber who registers a fresh account is known by the app
    /// transaction their device links to both accounts, and refused the new-subscriber offer for that reason.
    @Test func aReturningSubscriberOnAFreshAccountIsRefusedTheNewSubscriberOfferThroughTheAppTransaction() async throws {
        try await SuiteFixture.with { suite in
            let rae = try await suite.register("rae")
            let device = try await suite.simulator.call(SimAppTransaction.self, .init(appleId: "rae@icloud", bundleId: SuiteFixture.bundleId))
            let linked = try await suite.accounts.call(
                AccountsLinkAppTransaction.self, .init(session: rae.session, signedAppTransaction: device.signedAppTransaction))
            #expect(linked.appTransactionId == device.appTransactionId)
            let sub = try await Self.buy(suite, "rae@icloud", token: rae.appAccountToken)
            _ = try await suite.redeem(rae.session, signed: [sub.signedTransaction])

            // A fresh account with nothing bought on it: its customer is unknown, so only `anyone` offers.
            let fresh = try await suite.register("rae-again")
            #expect(try await Self.eligibility(suite, fresh.session) == ["winback": false, "welcome": false, "loyal": false])
            let unknown = await rpcError { try await Self.sign(suite, fresh.session, "welcome") }
            #expect(unknown?.reason == "notEligible" && unknown?.message.contains("customer is unknown") == true, "\(String(describing: unknown))")

            // The same device links it: the same Apple customer, who subscribed before. A link only narrows (whoever holds
            // the JWS can present it), so nothing becomes eligible, but the new-subscriber offer is now refused for what
            // the customer did, and StoreKit is told, signed, that the introductory offer is not theirs.
            _ = try await suite.accounts.call(
                AccountsLinkAppTransaction.self, .init(session: fresh.session, signedAppTransaction: device.signedAppTransaction))
            #expect(try await Self.eligibility(suite, fresh.session) == ["winback": false, "welcome": false, "loyal": false])
            let refused = await rpcError { try await Self.sign(suite, fresh.session, "welcome") }
            #expect(refused?.reason == "notEligible" && refused?.message.contains("subscribed before") == true, "\(String(describing: refused))")
            let answer = try await suite.fulfillment.call(FulfillmentOfferEligibility.self, .init(session: fresh.session, productId: "sub.premium"))
            #expect(answer.introductoryOfferEligible == false)
            let intro = try Self.claims(try #require(answer.introductoryOfferJWS))
            #expect(intro["allowIntroductoryOffer"] == .bool(false) && intro["transactionId"]?.stringValue == sub.transactionId)

            // Another Apple ID's device on another fresh account is another customer: nothing of Rae's applies to it.
            let sam = try await suite.register("sam")
            let samDevice = try await suite.simulator.call(SimAppTransaction.self, .init(appleId: "sam@icloud", bundleId: SuiteFixture.bundleId))
            _ = try await suite.accounts.call(
                AccountsLinkAppTransaction.self, .init(session: sam.session, signedAppTransaction: samDevice.signedAppTransaction))
            #expect(samDevice.appTransactionId != device.appTransactionId)
            #expect(try await Self.eligibility(suite, sam.session) == ["winback": false, "welcome": false, "loyal": false])
            let customer = try await suite.accounts.call(
                AccountsAppleCustomer.self, .init(internalToken: SuiteFixture.internalToken, appTransactionId: device.appTransactionId))
            #expect(Set(customer.links.map(\.accountId)) == [rae.accountId, fresh.accountId])
        }
    }

    @Test func aLapsedTestFlightSubscriptionDoesNotMakeAWinBackCustomer() async throws {
        try await SuiteFixture.with { suite in
            // Free Sandbox value: a TestFlight subscription, redeemed into the Sandbox scope, then lapsed.
            let tess = try await suite.register("tess")
            let sandbox = try await suite.buy("tess@icloud", "sub.premium", appAccountToken: tess.appAccountToken, environment: .sandbox)
            _ = try await suite.redeem(tess.session, signed: [sandbox.signedTransaction])
            #expect(try await suite.entitlements(tess.session, .sandbox).count == 1)
            _ = try await suite.simulator.call(
                SimSetAutoRenew.self, .init(appleId: "tess@icloud", transactionId: sandbox.transactionId, enabled: false))
            suite.clock.advance(ms: 31 * Self.day)
            _ = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 31 * 86_400))
            // Offers are decided from the Production customer: a TestFlight purchase does not name one.
            #expect(try await Self.eligibility(suite, tess.session) == ["winback": false, "welcome": false, "loyal": false])
            #expect(await rpcError { try await Self.sign(suite, tess.session, "winback") }?.reason == "notEligible")
            // A Production subscriber cannot ask to be judged by an empty Sandbox scope (the signature names no
            // environment, so it would work in Production): there is no such parameter.
            let ula = try await suite.register("ula")
            let paid = try await suite.buy("ula@icloud", "sub.premium", appAccountToken: ula.appAccountToken)
            _ = try await suite.redeem(ula.session, signed: [paid.signedTransaction])
            let judged = await rpcError {
                try await suite.fulfillment.callRaw(
                    method: FulfillmentSignOffer.name,
                    params: Array(#"{"session":"\#(ula.session)","productId":"sub.premium","offerId":"welcome","environment":"Sandbox"}"#.utf8))
            }
            #expect(judged?.reason == "notEligible")
        }
    }

    @Test func anIneligibleAccountIsRefusedWithTheRuleAndUnknownOffersAndProductsAreNamed() async throws {
        try await SuiteFixture.with { suite in
            let bob = try await suite.register("bob")
            try await Self.knownCustomer(suite, bob, "bob@icloud")
            #expect(try await Self.eligibility(suite, bob.session) == ["winback": false, "welcome": true, "loyal": true])
            let winback = await rpcError { try await Self.sign(suite, bob.session, "winback") }
            #expect(winback?.reason == "notEligible" && winback?.message.contains("never subscribed") == true)
            #expect(await rpcError { try await Self.sign(suite, bob.session, "nope") }?.reason == "unknownOffer")
            #expect(await rpcError { try await Self.sign(suite, bob.session, "welcome", product: "coins.100") }?.reason == "unknownProduct")
            // Two paid periods: past "loyal" (at most one).
            let sub = try await Self.buy(suite, "bob@icloud", token: bob.appAccountToken)
            _ = try await suite.redeem(bob.session, signed: [sub.signedTransaction])
            suite.clock.advance(ms: 31 * Self.day)
            let renewal = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 31 * 86_400))
            for payload in renewal.notifications {
                _ = try await suite.fulfillment.call(
                    FulfillmentReceiveNotification.self, .init(signedPayload: payload, internalToken: SuiteFixture.internalToken))
            }
            let loyal = await rpcError { try await Self.sign(suite, bob.session, "loyal") }
            #expect(loyal?.reason == "notEligible" && loyal?.message.contains("paid for 2") == true)
            // The introductory offer is for accounts new to the group, signed for StoreKit.
            let intro = try await suite.fulfillment.call(FulfillmentOfferEligibility.self, .init(session: bob.session, productId: "sub.premium"))
            #expect(intro.introductoryOfferEligible == false)
            let introJWS = try #require(intro.introductoryOfferJWS)
            let claims = try JSONValue(parsing: try #require(SignedPayloadVerifier.unverifiedPayload(introJWS)))
            #expect(claims["aud"]?.stringValue == "introductory-offer-eligibility" && claims["allowIntroductoryOffer"] == .bool(false))
        }
    }

    /// A retired subscription is no longer sold: none of its offers is signed, introductory or promotional.
    @Test func aRetiredSubscriptionsOffersAreNotSigned() async throws {
        try await SuiteFixture.with { suite in
            let bob = try await suite.register("bob")
            try await Self.knownCustomer(suite, bob, "bob@icloud")
            _ = try await Self.sign(suite, bob.session, "welcome")
            try await suite.catalog.call(CatalogRetireProduct.self, .init(adminToken: SuiteFixture.adminToken, productId: "sub.premium"))
            let refused = await rpcError { try await Self.sign(suite, bob.session, "welcome") }
            #expect(refused?.reason == "productRetired" && refused?.code == 1002)
            #expect(await rpcError { _ = try await Self.eligibility(suite, bob.session) }?.reason == "productRetired")
        }
    }

    @Test func theAppStoreRefusesTamperedMisdirectedExpiredAndReusedOffers() async throws {
        try await SuiteFixture.with { suite in
            let cal = try await suite.register("cal")
            try await Self.knownCustomer(suite, cal, "cal@icloud")
            let other = try await suite.register("other")
            let signed = try await Self.sign(suite, cal.session, "welcome")
            var tampered = Self.offer(signed)
            tampered.offerIdentifier = "loyal"  // the signature is for "welcome"
            var wrongKey = Self.offer(signed)
            wrongKey.keyIdentifier = "ZZZZZZZZZZ"
            let cases: [(String, SimPromotionalOffer, String, String)] = [
                ("another offer id", tampered, "sub.premium", cal.appAccountToken),
                ("an unknown key id", wrongKey, "sub.premium", cal.appAccountToken),
                ("another product", Self.offer(signed), "sub.basic", cal.appAccountToken),
                ("another customer", Self.offer(signed), "sub.premium", other.appAccountToken),
            ]
            for (name, offer, product, token) in cases {
                let refused = await rpcError { try await Self.buy(suite, "cal@icloud", token: token, product: product, offer: offer) }
                #expect(refused?.reason == "invalidOfferSignature", "\(name): \(String(describing: refused))")
            }
            // The JWS form: accepted once; a payload altered after signing is not.
            let jws = try await Self.sign(suite, cal.session, "welcome").jws
            var parts = jws.split(separator: ".").map(String.init)
            let claims = try JSONValue(parsing: try #require(SignedPayloadVerifier.unverifiedPayload(jws)))
            var altered = try #require(claims.objectValue)
            altered["offerIdentifier"] = "loyal"
            parts[1] = JWSSigningPKI.base64URL(try JSONByteEncoder.encode(JSONValue.object(altered)))
            let forged = await rpcError { try await Self.buy(suite, "cal@icloud", token: cal.appAccountToken, jws: parts.joined(separator: ".")) }
            #expect(forged?.reason == "invalidOfferSignature")
            let bought = try await Self.buy(suite, "cal@icloud", token: cal.appAccountToken, jws: jws)
            let transaction = try JSONValue(parsing: try #require(SignedPayloadVerifier.unverifiedPayload(bought.signedTransaction)))
            #expect(transaction["offerIdentifier"]?.stringValue == "welcome")
            #expect(
                await rpcError { try await Self.buy(suite, "cal@icloud", token: cal.appAccountToken, jws: jws) }?.reason == "offerNonceReused")
            // Older than 24 hours at the App Store: expired (the first signature was never used).
            _ = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 25 * 3_600))
            let late = await rpcError { try await Self.buy(suite, "other@icloud", token: cal.appAccountToken, offer: Self.offer(signed)) }
            #expect(late?.reason == "offerExpired")
        }
    }

    /// The attack: a lapsed subscriber registers a fresh account to be judged a new subscriber (welcome offer, signed
    /// introductory offer). Offers are for the Apple customer: judged by their history at Apple.
    @Test func aReturningSubscriberOnAFreshAccountIsJudgedByTheirHistoryAtApple() async throws {
        try await SuiteFixture.with { suite in
            let first = try await suite.register("amy1")
            let sub = try await Self.buy(suite, "amy@icloud", token: first.appAccountToken)
            _ = try await suite.redeem(first.session, signed: [sub.signedTransaction])
            _ = try await suite.simulator.call(
                SimSetAutoRenew.self, .init(appleId: "amy@icloud", transactionId: sub.transactionId, enabled: false))
            suite.clock.advance(ms: 31 * Self.day)
            _ = try await suite.simulator.call(SimAdvanceClock.self, .init(seconds: 31 * 86_400))

            // A fresh account holds nothing that names its Apple customer: nothing that needs history is signed.
            let second = try await suite.register("amy2")
            #expect(try await Self.eligibility(suite, second.session) == ["winback": false, "welcome": false, "loyal": false])
            let unknown = await rpcError { try await Self.sign(suite, second.session, "welcome") }
            #expect(unknown?.reason == "notEligible" && unknown?.message.contains("customer is unknown") == true)
            let fresh = try await suite.fulfillment.call(FulfillmentOfferEligibility.self, .init(session: second.session, productId: "sub.premium"))
            #expect(!fresh.introductoryOfferEligible && fresh.introductoryOfferJWS == nil)
            #expect(fresh.introductoryOfferReason?.contains("StoreKit decides") == true)

            // A coin purchase on the fresh account names her: Apple's history has her lapsed subscription.
            let coins = try await Self.knownCustomer(suite, second, "amy@icloud")
            #expect(try await Self.eligibility(suite, second.session) == ["winback": true, "welcome": false, "loyal": true])
            let welcome = await rpcError { try await Self.sign(suite, second.session, "welcome") }
            #expect(welcome?.reason == "notEligible" && welcome?.message.contains("subscribed before") == true)
            let intro = try await suite.fulfillment.call(FulfillmentOfferEligibility.self, .init(session: second.session, productId: "sub.premium"))
            #expect(!intro.introductoryOfferEligible && intro.introductoryOfferReason?.contains("subscribed in the group before") == true)
            let introClaims = try Self.claims(try #require(intro.introductoryOfferJWS))
            #expect(introClaims["allowIntroductoryOffer"] == .bool(false))
            #expect(introClaims["transactionId"]?.stringValue == coins.transactionId)
            // The win-back offer she may have names her transaction, as Apple's form recommends.
            let winback = try await Self.sign(suite, second.session, "winback")
            #expect(try Self.claims(winback.jws)["transactionId"]?.stringValue == coins.transactionId)
        }
    }

    /// Without the App Store Server API nothing says who the customer is at Apple: offers that need history are
    /// refused, `anyone` offers and the unsigned answer stay.
    @Test func withoutTheAppStoreServerAPIOffersThatNeedHistoryAreRefused() async throws {
        try await SuiteFixture.with(appStoreAPI: false) { suite in
            let eve = try await suite.register("eve")
            try await Self.knownCustomer(suite, eve, "eve@icloud")
            #expect(try await Self.eligibility(suite, eve.session) == ["winback": false, "welcome": false, "loyal": false])
            let refused = await rpcError { try await Self.sign(suite, eve.session, "welcome") }
            #expect(refused?.reason == "notEligible" && refused?.message.contains("not configured") == true)
            let intro = try await suite.fulfillment.call(FulfillmentOfferEligibility.self, .init(session: eve.session, productId: "sub.premium"))
            #expect(!intro.introductoryOfferEligible && intro.introductoryOfferJWS == nil)
        }
    }

    /// One history read at Apple serves a paywall's questions for a minute; past the account's budget, 1006.
    @Test func historyReadsForOffersComeFromTheAccountsBudgetOfAppleCalls() async throws {
        try await SuiteFixture.with { suite in
            let fay = try await suite.register("fay")
            try await Self.knownCustomer(suite, fay, "fay@icloud")
            let before = suite.simAPI.requestCount
            for _ in 0..<5 { _ = try await Self.eligibility(suite, fay.session) }
            _ = try await Self.sign(suite, fay.session, "welcome")
            #expect(suite.simAPI.requestCount - before == 1, "one history page for six questions within a minute")
            // A minute on, a new read; but this account spent its budget (20 calls) redeeming by id: 1006.
            suite.clock.advance(ms: 61_000)
            let ids = (0..<20).map { String(9_000_000_000 + $0) }
            _ = try await suite.fulfillment.call(FulfillmentRedeem.self, .init(session: fay.session, transactionIds: ids))
            let refused = await rpcError { try await Self.eligibility(suite, fay.session) }
            #expect(refused?.knownCode == .rateLimited && refused?.message.contains("budget of calls to Apple") == true)
        }
    }

    @Test func bothSignatureFormsVerifyWithPythonsCryptography() async throws {
        try await SuiteFixture.with { suite in
            let dee = try await suite.register("dee")
            try await Self.knownCustomer(suite, dee, "dee@icloud")
            let signed = try await Self.sign(suite, dee.session, "welcome")
            let key = try await suite.simulator.call(SimOfferKey.self, .init())
            let publicPEM = try P256.Signing.PrivateKey(pemRepresentation: key.privateKey).publicKey.pemRepresentation
            let script = """
                import base64, json, sys
                from cryptography.hazmat.primitives import hashes, serialization
                from cryptography.hazmat.primitives.asymmetric import ec
                from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
                pub = serialization.load_pem_public_key(sys.argv[1].encode())
                o = json.loads(sys.argv[2])
                message = "\\u2063".join([o["bundleId"], o["keyId"], o["productId"], o["offerId"], o["appAccountToken"], o["nonce"], str(o["timestamp"])])
                pub.verify(base64.b64decode(o["signature"]), message.encode(), ec.ECDSA(hashes.SHA256()))
                def b64url(s):
                    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
                h, p, s = o["jws"].split(".")
                header, claims, raw = json.loads(b64url(h)), json.loads(b64url(p)), b64url(s)
                assert header["alg"] == "ES256" and header["kid"] == o["keyId"] and header["typ"] == "JWT", header
                der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
                pub.verify(der, (h + "." + p).encode(), ec.ECDSA(hashes.SHA256()))
                assert claims["aud"] == "promotional-offer" and claims["bid"] == o["bundleId"], claims
                assert claims["productId"] == o["productId"] and claims["offerIdentifier"] == o["offerId"], claims
                assert claims["nonce"] == o["nonce"] and claims["iss"] == o["issuerId"] and isinstance(claims["iat"], int), claims
                print("both forms verify")
                """
            let fields: JSONValue = [
                "bundleId": .string(SuiteFixture.bundleId), "keyId": .string(signed.keyId), "productId": .string(signed.productId),
                "offerId": .string(signed.offerId), "appAccountToken": .string(signed.appAccountToken), "nonce": .string(signed.nonce),
                "timestamp": .int(signed.timestamp), "signature": .string(signed.signature), "jws": .string(signed.jws),
                "issuerId": .string(key.issuerId),
            ]
            let run = try await Subprocess.run(
                Judges.pythonOrSystem, ["-c", script, publicPEM, String(decoding: try JSONByteEncoder.encode(fields), as: UTF8.self)])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(run.stdout.contains("both forms verify"))
        }
    }
}
