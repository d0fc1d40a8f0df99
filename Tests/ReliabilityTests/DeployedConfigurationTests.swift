import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import Testing

/// The configuration people deploy, run as deployed: each service of `compose/compose.yaml` (with
/// `compose.postgres.yaml` for the PostgreSQL flavour: two instances each) started with the command and environment
/// the files give (read by `compose/compose_services.py`, so the test and the files cannot drift), and only the
/// rewrites `Deployment.rewrite` lists. The catalog is created by the operator's command; the money story runs
/// through the edge over HTTPS with `curl`, and Apple's notifications reach the edge's webhook from the simulator.
/// Without the App Store Server API (compose's default) refunds used to stay pending for ever.
@Suite(.enabled(if: Judges.available), .serialized) struct DeployedConfigurationTests {
    @Test(arguments: [false, true]) func theMoneyStoryOnTheDeployedSQLiteConfiguration(appStoreAPI: Bool) async throws {
        try await Deployment.with(files: ["compose/compose.yaml"], appStoreAPI: appStoreAPI) { try await Self.story($0) }
    }

    @Test(.enabled(if: TestPostgres.isAvailable), arguments: [false, true])
    func theMoneyStoryOnTheDeployedPostgreSQLConfiguration(appStoreAPI: Bool) async throws {
        let database = try await TestPostgres.newDatabase()
        try await Deployment.with(
            files: ["compose/compose.yaml", "compose/compose.postgres.yaml"], appStoreAPI: appStoreAPI, databaseURL: database
        ) { try await Self.story($0) }
        // Each service signed in as its own login (compose/postgres-roles.sh): fulfillment reads its tables, and accounts'
        // or catalog's login cannot (a flaw there does not reach wallets or webhook secrets); none is a superuser.
        func signedInAs(_ role: String) -> String { Deployment.login(of: "postgres://\(role)@postgres:5432/iap", on: database) }
        #expect(try await TestPostgres.psql(signedInAs("iap_fulfillment"), "SELECT count(*) > 0 FROM fulfillment.ledger") == "t")
        for role in ["iap_accounts", "iap_catalog"] {
            await #expect(throws: TestPostgres.Failure.self, "\(role) reads fulfillment's tables") {
                try await TestPostgres.psql(signedInAs(role), "SELECT count(*) FROM fulfillment.webhook_endpoint")
            }
        }
        let superusers = try await TestPostgres.psql(
            database, "SELECT count(*) FROM pg_roles WHERE rolsuper AND rolname IN ('iap_accounts', 'iap_catalog', 'iap_fulfillment')")
        #expect(superusers == "0")
        #expect(
            try await TestPostgres.psql(database, "SELECT nspowner::regrole FROM pg_namespace WHERE nspname = 'fulfillment'") == "iap_fulfillment")
    }

    /// Google Play through compose.yaml's Play settings (the key file as a secret, the package names, the push subscription's
    /// audience and email): a purchase redeemed through the edge and consumed at Google by the outbox; a refund made in Play
    /// Console pushed to the edge's Google Play route, verified and applied with its debt; a license tester's purchase that
    /// only the push brings, granted in Sandbox.
    @Test func theGooglePlayStoryOnTheDeployedConfiguration() async throws {
        try await Deployment.with(files: ["compose/compose.yaml"], appStoreAPI: false, play: true) { d in
            let ann = try await d.edge("accounts.register", ["username": "ann", "password": "correct horse battery"])
            let session = try #require(ann["session"]?["token"]?.stringValue, "\(ann)")
            let token = try #require(ann["appAccountToken"]?.stringValue)
            func buy(_ test: Bool = false) async throws -> JSONValue {
                try await d.play(
                    "play.purchase",
                    [
                        "packageName": .string(Deployment.bundleId), "productId": "coins.100", "obfuscatedExternalAccountId": .string(token),
                        "testPurchase": .bool(test),
                    ])
            }
            func wallet(_ environment: String = "Production") async throws -> (Int64, Int64) {
                let answer = try await d.edge("fulfillment.getBalance", ["environment": .string(environment)], session: session)
                return (answer["balance"]?.intValue ?? -1, answer["owed"]?.intValue ?? -1)
            }
            let coins = try await buy()
            let purchaseToken = try #require(coins["purchaseToken"]?.stringValue, "\(coins)")
            let redeemed = try await d.edge(
                "fulfillment.redeem", ["googlePlay": [["productId": "coins.100", "purchaseToken": .string(purchaseToken)]]], session: session)
            #expect(redeemed["balance"]?.intValue == 100, "\(redeemed)")
            try await d.eventually("consumed at Google by the outbox") {
                try await d.play("play.getPurchase", ["purchaseToken": .string(purchaseToken)])["consumed"] == true
            }
            _ = try await d.edge("fulfillment.spendCoins", ["amount": 70, "idempotencyKey": "sword"], session: session)
            _ = try await d.play("play.refund", ["purchaseToken": .string(purchaseToken)])
            _ = try await d.play("play.deliverNotifications", [:])
            try await d.eventually("the refund's push applied: 30 taken back, 70 owed") { try await wallet() == (0, 70) }
            _ = try await buy(true)
            _ = try await d.play("play.deliverNotifications", [:])
            try await d.eventually("the tester's purchase, pushed only, granted in Sandbox") { try await wallet("Sandbox") == (100, 0) }
            #expect(try await wallet() == (0, 70))
            #expect(try await d.inboxSettled())
        }
    }

    static func story(_ d: Deployment) async throws {
        let ann = try await d.edge("accounts.register", ["username": "ann", "password": "correct horse battery"])
        let session = try #require(ann["session"]?["token"]?.stringValue, "\(ann)")
        let token = try #require(ann["appAccountToken"]?.stringValue)
        func buy(_ product: String, _ type: String, tokened: Bool = true) async throws -> JSONValue {
            try await d.sim(
                "sim.purchase",
                [
                    "appleId": "ann@icloud", "bundleId": .string(Deployment.bundleId), "productId": .string(product), "productType": .string(type),
                    "appAccountToken": tokened ? .string(token) : .null,
                ])
        }
        func redeem(_ purchase: JSONValue) async throws -> JSONValue {
            try await d.edge("fulfillment.redeem", ["signedTransactions": [purchase["signedTransaction"] ?? .null]], session: session)
        }
        func wallet() async throws -> (Int64, Int64) {
            let answer = try await d.edge("fulfillment.getBalance", [:], session: session)
            return (answer["balance"]?.intValue ?? -1, answer["owed"]?.intValue ?? -1)
        }
        func entitlements() async throws -> [JSONValue] {
            try await d.edge("fulfillment.getEntitlements", [:], session: session)["entitlements"]?.arrayValue ?? []
        }
        func spend(_ amount: Int64, _ key: String) async throws {
            _ = try await d.edge("fulfillment.spendCoins", ["amount": .int(amount), "idempotencyKey": .string(key)], session: session)
        }
        /// Apple's notification for `event` is POSTed to the edge's webhook; its effect shows once fulfillment applied it.
        func notified(_ method: String, _ params: JSONValue, until effect: String, _ check: () async throws -> Bool) async throws {
            _ = try await d.sim(method, params)
            let delivered = try await d.sim("sim.deliverNotifications", [:])
            #expect(delivered["succeeded"] == delivered["attempted"], "\(method): \(delivered)")
            try await d.eventually(effect, check)
        }

        let coins = try await buy("coins.100", "consumable")
        #expect(try await redeem(coins)["balance"]?.intValue == 100)
        // Finish Transaction at Apple follows the App Store Server API in compose.yaml: with it the grant is finished there
        // once (the outbox worker, after the commit); without it nothing is owed to Apple.
        if d.appStoreAPI {
            try await d.eventually("the grant finished at Apple") {
                try await d.sim("sim.serverFinishes", ["transactionId": coins["transactionId"] ?? .null])["finishedAtMs"]?.arrayValue?.count == 1
            }
        } else {
            let outbox = try await d.fulfillment.call(FulfillmentListOutbox.self, .init(adminToken: Deployment.adminToken))
            #expect(!outbox.items.contains { $0.kind == "finishTransaction" }, "\(outbox.items)")
        }
        try await spend(70, "sword")
        func ids(_ p: JSONValue, _ extra: [String: JSONValue] = [:]) -> JSONValue {
            .object(["appleId": "ann@icloud", "transactionId": p["transactionId"] ?? .null].merging(extra) { $1 })
        }
        try await notified("sim.refund", ids(coins), until: "REFUND: 30 taken back, 70 owed") { try await wallet() == (0, 70) }
        try await notified("sim.refundDecision", ids(coins, ["event": "reverse"]), until: "REFUND_REVERSED: as before the refund") {
            try await wallet() == (30, 0)
        }

        let more = try await buy("coins.100", "consumable")
        _ = try await redeem(more)
        try await spend(130, "castle")
        try await notified("sim.refund", ids(more), until: "REFUND of spent coins: 100 owed") { try await wallet() == (0, 100) }
        let repay = try await redeem(try await buy("coins.100", "consumable"))
        #expect(repay["balance"]?.intValue == 0 && repay["owed"]?.intValue == 0, "the next purchase repays the debt: \(repay)")

        let pro = try await buy("pro.monthly", "autoRenewable")
        _ = try await redeem(pro)
        let firstEnd = try #require(try await entitlements().first { $0["entitlement"] == "pro" }?["expiresAtMs"]?.intValue)
        try await notified("sim.advanceClock", ["seconds": .int(31 * 86_400)], until: "DID_RENEW: the subscription runs on") {
            (try await entitlements().first { $0["entitlement"] == "pro" }?["expiresAtMs"]?.intValue ?? 0) > firstEnd
        }
        try await notified("sim.setAutoRenew", ids(pro, ["enabled": false]), until: "DID_CHANGE_RENEWAL_STATUS: will not renew") {
            try await entitlements().first { $0["entitlement"] == "pro" }?["willRenew"] == false
        }
        try await notified("sim.advanceClock", ["seconds": .int(31 * 86_400)], until: "EXPIRED: applied, nothing left pending") {
            try await d.inboxSettled()
        }

        // Family Sharing: the pack ann's family organizer bought, shared with her (a FAMILY_SHARED transaction of her own,
        // without a token: Apple refuses to tie it, and the outbox lets it go), until the organizer stops sharing it.
        let bought = try await d.sim(
            "sim.purchase",
            ["appleId": "dad@icloud", "bundleId": .string(Deployment.bundleId), "productId": "levels.pack1", "productType": "nonConsumable"])
        let pack = try await d.sim(
            "sim.shareWithFamily", ["appleId": "dad@icloud", "transactionId": bought["transactionId"] ?? .null, "memberAppleId": "ann@icloud"])
        _ = try await redeem(pack)
        #expect(try await entitlements().contains { $0["entitlement"] == "levels.pack1" })
        try await notified(
            "sim.lifecycleEvent", ["appleId": "dad@icloud", "transactionId": bought["transactionId"] ?? .null, "event": "revokeFamilySharing"],
            until: "REVOKE: the pack shared with ann is gone"
        ) {
            try await !entitlements().contains { $0["entitlement"] == "levels.pack1" }
        }

        // A purchase made with the account's token is granted once, whichever comes first: its ONE_TIME_CHARGE at the
        // webhook (from the signed snapshot, or Apple's word) or a redeem by transaction id, which needs Apple's word:
        // answered with the API, refused (typed) without.
        let before = try await wallet()
        let byId = try await buy("coins.100", "consumable")
        let answer = try await d.edgeAnswer(
            "fulfillment.redeem", ["transactionIds": [byId["transactionId"] ?? .null]], session: session)
        if d.appStoreAPI {
            let outcome = answer["result"]?["results"]?[0]?["outcome"]?.stringValue
            #expect(outcome == "granted" || outcome == "alreadyGranted", "\(answer)")
        } else {
            #expect(answer["error"]?["data"]?["reason"]?.stringValue == RPCErrorReason.appStoreAPINotConfigured.rawValue, "\(answer)")
        }
        _ = try await d.sim("sim.deliverNotifications", [:])
        try await d.eventually("ONE_TIME_CHARGE and the redeem: granted once") {
            let settled = try await d.inboxSettled()
            let balance = try await wallet().0
            return settled && balance == before.0 + 100
        }
        _ = try await d.sim("sim.deliverNotifications", [:])
        #expect(try await wallet() == (before.0 + 100, 0))
        #expect(try await d.inboxSettled(), "every notification applied or ignored, none pending or parked")
    }
}

extension JSONValue {
    subscript(index: Int) -> JSONValue? {
        guard case .array(let items) = self, items.indices.contains(index) else { return nil }
        return items[index]
    }
}
