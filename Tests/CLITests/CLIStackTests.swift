import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import Receipts
import SuiteTestSupport
import Testing

/// The built `iap` binary as a subprocess against a live suite (every service on a real port): each
/// command's `--json` output is exactly the service's result, and exit codes tell refusals (1),
/// unreachable services (2) and usage errors (64) apart.
@Suite struct CLIStackTests {
    struct Run {
        var status: Int32
        var stdout: String
        var stderr: String
        /// The `--json` answer; a run that printed none fails with its exit status and stderr.
        func decode<T: Decodable>(_ type: T.Type) throws -> T {
            do {
                return try JSONDecoder().decode(T.self, from: Data(stdout.utf8))
            } catch {
                throw RunFailure(description: "exit \(status), no \(T.self) in stdout \(stdout.prefix(300)); stderr: \(stderr.prefix(500))")
            }
        }
    }

    struct RunFailure: Error, CustomStringConvertible {
        let description: String
    }

    /// Runs the built `iap` with the suite's addresses and a private config file; no IAP_* variable of
    /// this process leaks into it.
    static func iap(_ args: [String], env: [String: String]) async throws -> Run {
        let run = try await BuiltExecutables.run("iap", args, env: env)
        return Run(status: run.status, stdout: run.stdout, stderr: run.stderr)
    }

    @Test func everyCommandAgainstALiveSuite() async throws {
        try await SuiteFixture.with(play: true) { suite in
            let home = FileManager.default.temporaryDirectory.appendingPathComponent("cli-home-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
            let configPath = home.appendingPathComponent("iap/config.json").path
            var env = suite.environment
            env["IAP_CONFIG"] = configPath
            env["HOME"] = home.path
            func iap(_ args: String...) async throws -> Run { try await Self.iap(args, env: env) }

            // accounts: the session is saved 0600 and used by every later command.
            let registered = try await iap("accounts", "register", "alice", "--password", "correct horse battery", "--json")
            #expect(registered.status == 0, "\(registered.stderr)")
            let signedIn = try registered.decode(SignedIn.self)
            let permissions = try FileManager.default.attributesOfItem(atPath: configPath)[.posixPermissions] as? Int
            #expect(permissions == 0o600)
            #expect(try String(contentsOfFile: configPath, encoding: .utf8).contains(signedIn.session.token))
            // Keys the CLI writes are 0600 too, replacing what was there.
            let keyPath = home.appendingPathComponent("api-key.pem").path
            try Data("old".utf8).write(to: URL(fileURLWithPath: keyPath))
            #expect(try await iap("sim", "api-key", "--output", keyPath).status == 0)
            #expect(try FileManager.default.attributesOfItem(atPath: keyPath)[.posixPermissions] as? Int == 0o600)
            #expect(try String(contentsOfFile: keyPath, encoding: .utf8).hasPrefix("-----BEGIN PRIVATE KEY-----"))
            #expect(try await iap("accounts", "whoami", "--json").decode(AuthenticatedAccount.self).accountId == signedIn.accountId)
            #expect(try await iap("accounts", "sessions", "--json").decode(AccountsListSessions.Result.self).sessions.count == 1)
            let wrongPassword = try await iap("accounts", "login", "alice", "--password", "not it at all", "--json")
            #expect(wrongPassword.status == 1 && wrongPassword.stderr.contains("error 1001"))

            // Addresses may come from the config file instead of the environment.
            var config = try JSONValue.parseJSON(try String(contentsOfFile: configPath, encoding: .utf8)).objectValue ?? [:]
            config["addresses"] = .object(["catalog": .string(env["IAP_CATALOG_ADDR"]!)])
            try Data(JSONByteEncoder.encode(JSONValue.object(config))).write(to: URL(fileURLWithPath: configPath))
            var withoutCatalogVariable = env
            withoutCatalogVariable["IAP_CATALOG_ADDR"] = nil
            let fromConfig = try await Self.iap(["catalog", "list", "--json"], env: withoutCatalogVariable)
            #expect(fromConfig.status == 0, "\(fromConfig.stderr)")
            // ...and a later login keeps them.
            #expect(try await iap("accounts", "login", "alice", "--password", "correct horse battery").status == 0)
            #expect(try await Self.iap(["catalog", "list"], env: withoutCatalogVariable).status == 0)

            // catalog
            let listed = try await iap("catalog", "list", "--json").decode(CatalogListProducts.Result.self)
            #expect(Set(listed.products.map(\.productId)) == Set(SuiteFixture.products.map(\.productId)))
            let got = try await iap("catalog", "get", "coins.100", "nope", "--json").decode(CatalogGetProducts.Result.self)
            #expect(got.products.map(\.productId) == ["coins.100"] && got.missing == ["nope"])
            #expect(
                try await iap("catalog", "set-price", "coins.100", "USA:USD:1.99", "--json").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
                    == "{}")
            #expect(
                try await iap("catalog", "get", "coins.100", "--json").decode(CatalogGetProducts.Result.self).products.first?.price?.amount == "1.99")
            #expect(try await iap("catalog", "set-price", "coins.100", "USA-USD-1.99").status == 64)
            let noToken = try await Self.iap(["catalog", "retire", "pass.season", "--admin-token", "wrong"], env: env)
            #expect(noToken.status == 1 && noToken.stderr.contains("admin"))

            // buy, redeem, spend
            let bought = try await iap("sim", "buy", "coins.100", "--apple-id", "alice@icloud", "--json").decode(SimPurchase.Result.self)
            let receiptFile = home.appendingPathComponent("receipt.b64")
            try bought.receiptData.write(to: receiptFile, atomically: true, encoding: .utf8)
            let verified = try await iap("receipt", "verify", receiptFile.path, "--json").decode(VerifyReceiptResponse.self)
            #expect(verified.status == 0 && verified.receipt?.inApp.first?.transactionId == bought.transactionId)
            let redeemed = try await iap("redeem", "--receipt", receiptFile.path, "--json").decode(RedeemResult.self)
            #expect(redeemed.results.map(\.outcome) == [.granted] && redeemed.balance == 100)
            #expect(
                try await iap("redeem", "--receipt", receiptFile.path, "--json").decode(RedeemResult.self).results.map(\.outcome) == [.alreadyGranted]
            )
            #expect(try await iap("balance", "--json").decode(BalanceResult.self).balance == 100)
            #expect(try await iap("spend", "30", "--key", "sword", "--json").decode(BalanceResult.self).balance == 70)
            #expect(try await iap("spend", "30", "--key", "sword", "--json").decode(BalanceResult.self).balance == 70)
            let tooMuch = try await iap("spend", "1000", "--json")
            #expect(tooMuch.status == 1 && tooMuch.stderr.contains("error 1005"))
            let ledger = try await iap("ledger", "--json").decode(FulfillmentListLedger.Result.self)
            #expect(ledger.entries.map(\.kind) == [.grant, .spend])
            #expect(try await iap("redeem").status == 64)

            // content: a resumed download, and a corrupt partial file refused
            let pack = try await iap("sim", "buy", "pack.castle", "--type", "nonConsumable", "--apple-id", "alice@icloud", "--json")
                .decode(SimPurchase.Result.self)
            let packRedeemed = try await iap("redeem", "--signed-transaction", pack.signedTransaction, "--json").decode(RedeemResult.self)
            #expect(packRedeemed.results.map(\.outcome) == [.granted])
            #expect(
                try await iap("entitlements", "--json").decode(FulfillmentGetEntitlements.Result.self).entitlements.map(\.entitlement) == ["castle"])
            let content = try await iap("content", "list", "--json").decode(FulfillmentListContent.Result.self).content
            #expect(content.map(\.contentId) == [SuiteFixture.contentId])
            let target = home.appendingPathComponent("castle.bin").path
            try Data(suite.content.prefix(1000)).write(to: URL(fileURLWithPath: target + ".part"))
            let download = try await iap("content", "download", SuiteFixture.contentId, "--output", target, "--chunk", "65536", "--json")
            #expect(download.status == 0, "\(download.stderr)")
            #expect(download.stderr.contains("resuming"))
            let summary = try JSONValue.parseJSON(download.stdout)
            #expect(summary["resumedFrom"] == .int(1000) && summary["sha256"] == .string(content[0].sha256))
            #expect(Array(try Data(contentsOf: URL(fileURLWithPath: target))) == suite.content)
            try Data(repeating: 0xAA, count: 1000).write(to: URL(fileURLWithPath: target + ".part"))
            let corrupt = try await iap("content", "download", SuiteFixture.contentId, "--output", target)
            #expect(corrupt.status == 1 && corrupt.stderr.contains("checksum mismatch"))
            #expect(!FileManager.default.fileExists(atPath: target + ".part"))

            // restore on this device
            let restore = try await iap("sim", "restore", "--apple-id", "alice@icloud", "--json").decode(SimRestore.Result.self)
            try restore.receiptData.write(to: receiptFile, atomically: true, encoding: .utf8)
            let restored = try await iap("restore", "--receipt", receiptFile.path, "--json").decode(RedeemResult.self)
            #expect(restored.entitlements.map(\.entitlement) == ["castle"] && restored.balance == 70)

            // the whole suite at once, and a service's methods
            let health = try await iap("health", "--json")
            #expect(health.status == 0, "\(health.stdout)\(health.stderr)")
            let reports = try JSONValue.parseJSON(health.stdout)
            #expect(Set(reports.objectValue?.keys.map { $0 } ?? []) == ["accounts", "catalog", "verification", "fulfillment", "sim", "play"])
            #expect(reports["fulfillment"]?["status"] == .string("ok"))
            let methods = try JSONValue.parseJSON(try await iap("methods", "fulfillment", "--json").stdout)
            let names = Set(methods["methods"]?.arrayValue?.compactMap { $0["name"]?.stringValue } ?? [])
            #expect(names.isSuperset(of: Set(ContractMethods.fulfillment.map(\.name))))
            #expect(try await iap("methods", "fulfillment").stdout.contains("fulfillment.spendCoins"))

            // the demo walks the whole story
            let demo = try await iap(
                "demo", "--coins-product", "coins.100", "--content-product", "pack.castle",
                "--download-dir", home.appendingPathComponent("demo").path)
            #expect(demo.status == 0, "\(demo.stdout)\n\(demo.stderr)")
            #expect(demo.stdout.contains("demo complete"))
            #expect(demo.stdout.contains("reversal"))
            #expect(demo.stdout.contains("recovery"), "the demo shows the refunded coins repaid by the next purchase")
            #expect(demo.stdout.contains("(Sandbox)"), "the demo shows the Sandbox purchase in its own scope")
            #expect(demo.stdout.contains("one balance across both stores"), "the demo buys on Google Play into the same balance")

            // signing out forgets the session; unreachable services are exit 2
            #expect(try await iap("accounts", "logout", "--json").stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "{}")
            let signedOut = try await iap("balance")
            #expect(signedOut.status == 1 && signedOut.stderr.contains("iap accounts login"))
            let unreachable = try await iap("catalog", "list", "--addr", "127.0.0.1:1")
            #expect(unreachable.status == 2 && unreachable.stderr.contains("compose/up.sh"))
        }
    }

    /// Every method of every service has a command (`iap call` is for anything else), and the table below
    /// is checked against the protocol module, so a new method without a command fails here.
    static let commandFor: [String: [String]] = [
        "accounts.register": ["accounts", "register"], "accounts.login": ["accounts", "login"], "accounts.logout": ["accounts", "logout"],
        "accounts.authenticate": ["accounts", "whoami"], "accounts.changePassword": ["accounts", "change-password"],
        "accounts.listSessions": ["accounts", "sessions"], "accounts.findByAppAccountToken": ["accounts", "find"],
        "catalog.listProducts": ["catalog", "list"], "catalog.getProducts": ["catalog", "get"], "catalog.upsertProduct": ["catalog", "upsert"],
        "catalog.setPrices": ["catalog", "set-price"], "catalog.retireProduct": ["catalog", "retire"],
        "catalog.importCatalog": ["catalog", "import"],
        "verification.verifyReceipt": ["receipt", "verify"], "verification.verifyTransaction": ["verify", "transaction"],
        "verification.verifyNotification": ["verify", "notification"],
        "verification.verifyPlayPurchase": ["verify", "play-purchase"], "verification.acknowledgePlayPurchase": ["verify", "play-acknowledge"],
        "verification.verifyPlayPush": ["verify", "play-push"], "fulfillment.receivePlayNotification": ["receive-play-notification"],
        "verification.playVoidedPurchases": ["verify", "play-voided"],
        "fulfillment.redeem": ["redeem"], "fulfillment.restore": ["restore"], "fulfillment.getEntitlements": ["entitlements"],
        "fulfillment.getBalance": ["balance"], "fulfillment.spendCoins": ["spend"], "fulfillment.listLedger": ["ledger"],
        "fulfillment.listContent": ["content", "list"], "fulfillment.readContent": ["content", "download"],
        "fulfillment.contentURL": ["content", "url"], "fulfillment.receiveNotification": ["receive-notification"],
        "fulfillment.listNotifications": ["admin", "notifications"], "fulfillment.listOutbox": ["admin", "outbox"],
        "fulfillment.retryNotification": ["admin", "retry-notification"],
        "fulfillment.applyNotification": ["apply-notification"], "fulfillment.revokeTransaction": ["revoke"],
        "play.serviceAccountKey": ["play", "key"], "play.purchase": ["play", "buy"], "play.getPurchase": ["play", "show"],
        "play.subscriptionEvent": ["play", "subscription"], "play.refund": ["play", "void"],
        "play.advanceClock": ["play", "advance-clock"], "play.setPushEndpoint": ["play", "push-endpoint"],
        "play.setPushFault": ["play", "push-fault"], "play.setFault": ["play", "fault"], "play.deliverNotifications": ["play", "deliver"],
        "sim.trustAnchor": ["sim", "trust-anchor"], "sim.purchase": ["sim", "buy"], "sim.finishTransaction": ["sim", "finish"],
        "sim.restore": ["sim", "restore"], "sim.refund": ["sim", "refund"], "sim.advanceClock": ["sim", "advance-clock"],
        "sim.receipt": ["sim", "receipt"], "sim.setFault": ["sim", "fault"], "sim.apiKey": ["sim", "api-key"],
        "verification.transactionInfo": ["appstore", "transaction"], "verification.transactionHistory": ["appstore", "history"],
        "verification.lookUpOrder": ["appstore", "order"], "fulfillment.lookUpOrder": ["support", "order"],
        "fulfillment.listAudit": ["support", "audit"], "fulfillment.grantOrder": ["support", "order"],
        "fulfillment.extendSubscription": ["support", "extend"], "accounts.findByUsername": ["accounts", "find-user"],
        "verification.subscriptionStatuses": ["appstore", "status"], "verification.refundHistory": ["appstore", "refunds"],
        "verification.notificationHistory": ["appstore", "notifications"],
        "verification.requestTestNotification": ["appstore", "test-notification"],
        "verification.testNotificationStatus": ["appstore", "test-notification"], "verification.sendConsumption": ["appstore", "consumption"],
        "verification.setAppAccountToken": ["appstore", "set-token"], "verification.finishTransaction": ["appstore", "finish"],
        "verification.extendRenewalDate": ["appstore", "extend"],
        "sim.setNotificationURL": ["sim", "notification-url"], "sim.deliverNotifications": ["sim", "deliver"],
        "sim.setAutoRenew": ["sim", "auto-renew"], "sim.consumptionReports": ["sim", "consumption"],
        "sim.serverFinishes": ["sim", "server-finishes"],
        "sim.setNotificationFault": ["sim", "notification-fault"], "sim.billing": ["sim", "billing"],
        "sim.refundDecision": ["sim", "refund-decision"], "fulfillment.reconcile": ["admin", "reconcile"],
        "sim.lifecycleEvent": ["sim", "event"], "sim.notify": ["sim", "notify"], "sim.offerKey": ["sim", "offer-key"],
        "sim.revokeCertificate": ["sim", "revoke"],
        "fulfillment.offerEligibility": ["offers", "eligible"], "fulfillment.signOffer": ["offers", "sign"],
        "catalog.setOffers": ["offers", "define"],
        "accounts.setConsumptionConsent": ["accounts", "consent"], "accounts.consumptionProfile": ["accounts", "consumption-profile"],
        "accounts.linkAppTransaction": ["accounts", "link-app-transaction"], "accounts.appleCustomer": ["accounts", "apple-customer"],
        "verification.verifyAppTransaction": ["verify", "app-transaction"], "verification.appTransactionInfo": ["appstore", "app-transaction"],
        "sim.appTransaction": ["sim", "app-transaction"],
        "verification.massExtendRenewalDate": ["appstore", "mass-extend"], "verification.massExtensionStatus": ["appstore", "mass-extend-status"],
        "fulfillment.extendAllSubscriptions": ["support", "extend"], "fulfillment.massExtensionStatus": ["support", "extend-status"],
        "fulfillment.listEvents": ["events", "tail"], "fulfillment.addWebhook": ["webhooks", "add"],
        "fulfillment.rotateWebhookSecret": ["webhooks", "rotate"], "fulfillment.listWebhooks": ["webhooks", "list"],
        "fulfillment.pauseWebhook": ["webhooks", "pause"], "fulfillment.deleteWebhook": ["webhooks", "delete"],
        "fulfillment.redeliverWebhook": ["webhooks", "redeliver"], "fulfillment.listDeliveries": ["webhooks", "deliveries"],
        "fulfillment.getCustomer": ["support", "account"], "fulfillment.adjustCoins": ["support", "adjust"],
        "accounts.getAccount": ["accounts", "get"], "fulfillment.getOverview": ["support", "overview"],
        "fulfillment.signOutCustomer": ["support", "sign-out"], "fulfillment.dismissNotification": ["admin", "dismiss-notification"],
        "accounts.revokeSessions": ["accounts", "revoke-sessions"], "sim.setRealtimeURL": ["sim", "realtime-url"],
        "sim.cancelIntent": ["sim", "cancel-intent"], "catalog.setRetention": ["retention", "set"],
        "catalog.getRetention": ["retention", "show"], "fulfillment.retentionMessage": ["retention", "answer"],
        "verification.verifyRealtimeRequest": ["verify", "realtime-request"], "sim.reviewMessaging": ["sim", "review"],
        "sim.shareWithFamily": ["sim", "share-family"],
    ]

    @Test func everyMethodOfEveryServiceHasACommand() async throws {
        #expect(Set(Self.commandFor.keys) == Set(ContractMethods.all.map(\.name)))
        for (method, words) in Self.commandFor.sorted(by: { $0.key < $1.key }) {
            let help = try await Self.iap(words + ["--help"], env: [:])
            #expect(help.status == 0, "\(method): iap \(words.joined(separator: " ")) --help exited \(help.status)")
        }
    }

    @Test func theCommandsForAdminInternalAndVerificationMethodsWork() async throws {
        try await SuiteFixture.with { suite in
            let home = FileManager.default.temporaryDirectory.appendingPathComponent("cli-more-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: home) }
            var env = suite.environment
            env["IAP_CONFIG"] = home.appendingPathComponent("config.json").path
            func iap(_ args: String...) async throws -> Run { try await Self.iap(args, env: env) }

            let registered = try await iap("accounts", "register", "carol", "--password", "correct horse battery", "--json").decode(SignedIn.self)
            #expect(
                try await iap(
                    "accounts", "change-password", "--current-password", "correct horse battery",
                    "--new-password", "another good passphrase"
                ).status == 0)
            #expect(try await iap("accounts", "login", "carol", "--password", "another good passphrase").status == 0)
            let found = try await iap("accounts", "find", registered.appAccountToken, "--internal-token", SuiteFixture.internalToken)
            #expect(found.stdout.contains(registered.accountId), "\(found.stderr)")
            #expect(try await iap("accounts", "find", registered.appAccountToken, "--internal-token", "wrong").status == 1)

            let productFile = home.appendingPathComponent("product.json")
            try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
            try Data(JSONByteEncoder.encode(SuiteFixture.product("coins.5000", .consumable, .coins(5000)))).write(to: productFile)
            #expect(try await iap("catalog", "upsert", productFile.path).status == 0)
            #expect(try await iap("catalog", "get", "coins.5000", "--json").decode(CatalogGetProducts.Result.self).products.count == 1)

            let bought = try await iap("sim", "buy", "coins.100", "--apple-id", "carol@icloud", "--price", "1.29", "--currency", "EUR", "--json")
                .decode(SimPurchase.Result.self)
            let claims = try #require(bought.signedTransaction.split(separator: ".").dropFirst().first)
            let decoded = try #require(
                Data(
                    base64Encoded: claims.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
                        .padding(toLength: (claims.count + 3) / 4 * 4, withPad: "=", startingAt: 0)))
            let json = String(decoding: decoded, as: UTF8.self)
            #expect(json.contains(#""price":1290"#) && json.contains(#""currency":"EUR""#), "the price in milliunits, as Apple's: \(json)")
            #expect(try await iap("sim", "buy", "coins.100", "--price", "1.29").status == 64, "--price needs --currency")
            let valid = try await iap("verify", "transaction", bought.signedTransaction)
            #expect(valid.status == 0 && valid.stdout.contains("VALID") && valid.stdout.contains(bought.transactionId), "\(valid.stdout)")
            #expect(try await iap("verify", "transaction", "not.a.jws").status == 1)
            #expect(try await iap("redeem", "--signed-transaction", bought.signedTransaction).status == 0)
            let refund = try await iap("sim", "refund", bought.transactionId, "--apple-id", "carol@icloud", "--json").decode(SimRefund.Result.self)
            let payload = try #require(refund.signedPayload)
            #expect(try await iap("verify", "notification", payload).stdout.contains("REFUND"))
            let applied = try await iap("apply-notification", payload)
            #expect(applied.status == 0 && applied.stdout.contains("applied"), "\(applied.stderr)")
            #expect(try await iap("balance", "--json").decode(BalanceResult.self).balance == 0)
            let received = try await iap("receive-notification", payload, "--json").decode(FulfillmentReceiveNotification.Result.self)
            #expect(received.state == .applied && !received.firstDelivery)
            let inbox = try await iap("admin", "notifications", "--json").decode(FulfillmentListNotifications.Result.self)
            #expect(inbox.notifications.map(\.notificationUUID) == [received.notificationUUID])
            #expect(
                try await iap("admin", "notifications", "--parked", "--json").decode(FulfillmentListNotifications.Result.self).notifications.isEmpty)
            #expect(try await iap("admin", "notifications", "--state", "lost").status == 64)
            #expect(
                try await iap("admin", "retry-notification", received.notificationUUID, "--json").decode(NotificationSummary.self).state == .applied)

            let again = try await iap("sim", "buy", "coins.100", "--apple-id", "carol@icloud", "--json").decode(SimPurchase.Result.self)
            #expect(try await iap("redeem", "--signed-transaction", again.signedTransaction).status == 0)
            #expect(try await iap("revoke", again.transactionId, "--reason", "chargeback").status == 0)
            #expect(try await iap("ledger", "--json").decode(FulfillmentListLedger.Result.self).entries.last?.kind == .reversal)
            #expect(try await iap("revoke", "no-such-transaction", "--reason", "x").status == 1)
            // A prorated refund (REFUND_PRORATED): one pack of three comes back.
            let packs = try await iap("sim", "buy", "coins.100", "--quantity", "3", "--apple-id", "carol@icloud", "--json").decode(
                SimPurchase.Result.self)
            #expect(try await iap("redeem", "--signed-transaction", packs.signedTransaction).status == 0)
            let before = try await iap("balance", "--json").decode(BalanceResult.self).balance
            let third = try await iap(
                "sim", "refund", packs.transactionId, "--apple-id", "carol@icloud", "--revocation-percentage", "33333", "--json")
            #expect(try await iap("apply-notification", try #require(try third.decode(SimRefund.Result.self).signedPayload)).status == 0)
            let kept = try await iap("balance", "--json").decode(BalanceResult.self).balance
            #expect(kept == before - 100)
            #expect(try await iap("sim", "refund", packs.transactionId, "--revocation-percentage", "100000").status != 0)

            // By transaction id: the server fetches the purchase from Apple (the simulator's App Store Server API).
            let me = try await iap("accounts", "whoami", "--json").decode(AuthenticatedAccount.self)
            let byId = try await iap(
                "sim", "buy", "coins.100", "--apple-id", "carol@icloud", "--app-account-token", me.appAccountToken, "--json"
            ).decode(SimPurchase.Result.self)
            #expect(byId.orderId?.hasPrefix("MK") == true)
            let redeemedById = try await iap("redeem", "--transaction-id", byId.transactionId, "--json").decode(RedeemResult.self)
            #expect(redeemedById.results.map(\.outcome) == [.granted])
            let info = try await iap("appstore", "transaction", byId.transactionId, "--internal-token", SuiteFixture.internalToken)
            #expect(info.status == 0 && info.stdout.contains("VALID"), "\(info.stdout)\(info.stderr)")
            let history = try await iap("appstore", "history", byId.transactionId, "--internal-token", SuiteFixture.internalToken, "--json")
                .decode(VerificationTransactionHistory.Result.self)
            #expect(history.transactions.contains { $0.transaction?["transactionId"]?.stringValue == byId.transactionId })
            #expect(try await iap("restore", "--transaction-id", byId.transactionId, "--json").decode(RedeemResult.self).balance == kept + 100)
            // Support: the order id on the customer's emailed receipt finds the purchase.
            let order = try await iap("appstore", "order", byId.orderId ?? "", "--internal-token", SuiteFixture.internalToken, "--json")
                .decode(VerificationTransactionHistory.Result.self)
            #expect(order.transactions.compactMap { $0.transaction?["transactionId"]?.stringValue } == [byId.transactionId])
            let noOrder = try await iap("appstore", "order", "MKNOSUCH00", "--internal-token", SuiteFixture.internalToken)
            #expect(noOrder.status == 0 && noOrder.stdout.contains("no order"))
            let supportRun = try await iap("support", "order", byId.orderId ?? "", "--json")
            #expect(supportRun.status == 0, "\(supportRun.stderr)")
            let supportOrder = try supportRun.decode(FulfillmentLookUpOrder.Result.self)
            #expect(supportOrder.lines.map(\.transactionId) == [byId.transactionId] && supportOrder.lines[0].ownerAccountId != nil)
            // The revocation above is in the audit log, under a digest of the admin token, never the token.
            let audit = try await iap("support", "audit", "--json").decode(FulfillmentListAudit.Result.self)
            let revoked = try #require(audit.entries.first { $0.action == "revoke" })
            #expect(revoked.transactionId == again.transactionId && revoked.reason == "chargeback")
            #expect(revoked.credential.count == 12 && !SuiteFixture.adminToken.contains(revoked.credential))

            // Support grants an order nobody redeemed to a username, and extends a subscription; both audited.
            let dave = try await iap("accounts", "register", "dave", "--password", "correct horse battery", "--json").decode(SignedIn.self)
            let davesOrder = try await iap("sim", "buy", "pack.castle", "--type", "nonConsumable", "--apple-id", "dave@icloud", "--json").decode(
                SimPurchase.Result.self)
            #expect(try await iap("support", "order", davesOrder.orderId ?? "", "--grant-to", "dave").status == 64, "--reason is required")
            let grant = try await iap("support", "order", davesOrder.orderId ?? "", "--grant-to", "dave", "--reason", "ticket 9", "--json")
                .decode(FulfillmentGrantOrder.Result.self)
            #expect(grant.accountId == dave.accountId && grant.results.map(\.outcome) == [.granted])
            let findUser = try await iap("accounts", "find-user", "dave", "--internal-token", SuiteFixture.internalToken)
            #expect(findUser.stdout.contains(dave.appAccountToken), "\(findUser.stderr)")
            let sub = try await iap("sim", "buy", "sub.premium", "--type", "autoRenewable", "--apple-id", "dave@icloud", "--json").decode(
                SimPurchase.Result.self)
            #expect(try await iap("redeem", "--signed-transaction", sub.signedTransaction).status == 0)
            let extending = try await iap(
                "support", "extend", sub.originalTransactionId, "--days", "3", "--reason-code", "3", "--reason", "outage", "--json")
            let extended = try extending.decode(FulfillmentExtendSubscription.Result.self)
            #expect(extended.accountId == dave.accountId)
            // The request id it made is printed first: run again with it (the answer was lost), the extension is the same one.
            let printed = try #require(extending.stderr.range(of: "--request-id "), "\(extending.stderr)").upperBound
            let requestId = String(extending.stderr[printed...].prefix { $0 != ")" })
            let rerun = try await iap(
                "support", "extend", sub.originalTransactionId, "--days", "3", "--reason-code", "3", "--reason", "outage", "--request-id",
                requestId, "--json"
            ).decode(FulfillmentExtendSubscription.Result.self)
            #expect(rerun.expiresAtMs == extended.expiresAtMs, "extended once: \(extended.expiresAtMs) then \(rerun.expiresAtMs)")
            // The app transaction: the device's, verified, linked to dave's account (the saved session), found by support.
            let device = try await iap("sim", "app-transaction", "--apple-id", "dave@icloud", "--json").decode(SimAppTransaction.Result.self)
            let checked = try await iap("verify", "app-transaction", device.signedAppTransaction)
            #expect(checked.status == 0 && checked.stdout.contains(device.appTransactionId), "\(checked.stdout)\(checked.stderr)")
            #expect(try await iap("verify", "app-transaction", bought.signedTransaction).status == 1, "a transaction is not an app transaction")
            let linked = try await iap("accounts", "link-app-transaction", device.signedAppTransaction)
            #expect(linked.status == 0 && linked.stdout.contains(device.appTransactionId), "\(linked.stderr)")
            let atApple = try await iap("appstore", "app-transaction", sub.transactionId, "--internal-token", SuiteFixture.internalToken)
            #expect(atApple.stdout.contains(device.appTransactionId), "\(atApple.stdout)\(atApple.stderr)")
            let customer = try await iap("support", "customer", "--transaction-id", sub.transactionId, "--internal-token", SuiteFixture.internalToken)
            #expect(
                customer.status == 0 && customer.stdout.contains(dave.accountId) && customer.stdout.contains("dave"),
                "\(customer.stdout)\(customer.stderr)")
            let links = try await iap(
                "accounts", "apple-customer", "--account-id", dave.accountId, "--internal-token", SuiteFixture.internalToken, "--json"
            ).decode(AccountsAppleCustomer.Result.self)
            #expect(links.links.map(\.appTransactionId) == [device.appTransactionId])
            let actions = try await iap("support", "audit", "--json").decode(FulfillmentListAudit.Result.self).entries.map(\.action)
            #expect(actions.contains("grantOrder") && actions.contains("extendSubscription"))
            // Apple's side: statuses, refunds, notification history, a test notification.
            let status = try await iap("appstore", "status", sub.transactionId, "--internal-token", SuiteFixture.internalToken, "--json")
                .decode(VerificationSubscriptionStatuses.Result.self)
            #expect(status.subscriptions.map(\.status) == [1])
            #expect(status.subscriptions.first?.transaction["expiresDate"]?.intValue == extended.expiresAtMs)
            let statusTable = try await iap("appstore", "status", sub.transactionId, "--internal-token", SuiteFixture.internalToken)
            #expect(statusTable.stdout.contains("active") && statusTable.stdout.contains("sub.premium"), "\(statusTable.stdout)")
            _ = try await iap("sim", "refund", davesOrder.transactionId, "--apple-id", "dave@icloud")
            let refunds = try await iap("appstore", "refunds", sub.transactionId, "--internal-token", SuiteFixture.internalToken, "--json")
                .decode(VerificationRefundHistory.Result.self)
            #expect(refunds.transactions.compactMap { $0.transaction?["transactionId"]?.stringValue } == [davesOrder.transactionId])
            let notified = try await iap("appstore", "notifications", "--type", "REFUND", "--internal-token", SuiteFixture.internalToken, "--json")
                .decode(VerificationNotificationHistory.Result.self)
            #expect(notified.notifications.count >= 2 && notified.notifications.allSatisfy { $0.notificationType == "REFUND" })
            let requested = try await iap("appstore", "test-notification", "--internal-token", SuiteFixture.internalToken, "--json")
                .decode(VerificationRequestTestNotification.Result.self)
            let testStatus = try await iap(
                "appstore", "test-notification", "--status", requested.testNotificationToken, "--internal-token", SuiteFixture.internalToken)
            #expect(testStatus.status == 0 && testStatus.stdout.contains("TEST notification"), "\(testStatus.stdout)\(testStatus.stderr)")
            // A yearly plan upgraded to a weekly one renews within eight days (the upgrade's own period).
            let yearly = try await iap(
                "sim", "buy", "sub.basic", "--type", "autoRenewable", "--period-days", "365", "--apple-id", "dave@icloud", "--json"
            )
            .decode(SimPurchase.Result.self)
            let upgraded = try await iap(
                "sim", "event", yearly.transactionId, "upgrade", "sub.premium", "--period-days", "7", "--apple-id", "dave@icloud")
            #expect(upgraded.status == 0, "\(upgraded.stderr)")
            #expect(try await iap("sim", "advance-clock", "--days", "8", "--json").decode(SimAdvanceClock.Result.self).renewals >= 1)
        }
    }

    @Test func offersAreDefinedSignedAndRedeemedInTheSimulatorThroughTheCLI() async throws {
        try await SuiteFixture.with { suite in
            let home = FileManager.default.temporaryDirectory.appendingPathComponent("cli-offers-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: home) }
            var env = suite.environment
            env["IAP_CONFIG"] = home.appendingPathComponent("config.json").path
            func iap(_ args: String...) async throws -> Run { try await Self.iap(args, env: env) }
            let erin = try await iap("accounts", "register", "erin", "--password", "correct horse battery", "--json").decode(SignedIn.self)
            // Offers are for the Apple customer: before any purchase names her, only `anyone` offers are signed.
            #expect(try await iap("offers", "eligible", "sub.premium").stdout.contains("StoreKit decides"))
            let coins = try await iap("sim", "buy", "coins.100", "--apple-id", "erin@icloud", "--app-account-token", erin.appAccountToken, "--json")
                .decode(SimPurchase.Result.self)
            let receiptFile = home.appendingPathComponent("receipt.b64")
            try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
            try coins.receiptData.write(to: receiptFile, atomically: true, encoding: .utf8)
            #expect(try await iap("redeem", "--receipt", receiptFile.path, "--json").decode(RedeemResult.self).results.map(\.outcome) == [.granted])
            let defined = try await iap("offers", "define", "sub.premium", "spring", "--rule", "neverSubscribed", "--ends", "2099-01-01T00:00:00Z")
            #expect(defined.status == 0, "\(defined.stderr)")
            #expect(try await iap("offers", "define", "sub.premium", "x", "--rule", "sometimes").status == 64)
            let listed = try await iap("offers", "list", "sub.premium")
            #expect(listed.stdout.contains("spring") && listed.stdout.contains("neverSubscribed") && listed.stdout.contains("winback"))
            let eligible = try await iap("offers", "eligible", "sub.premium")
            #expect(eligible.stdout.contains("spring") && eligible.stdout.contains("introductory offer: eligible"), "\(eligible.stdout)")
            let signed = try await iap("offers", "sign", "sub.premium", "spring", "--json")
            #expect(signed.status == 0, "\(signed.stderr)")
            let bought = try await iap(
                "sim", "buy", "sub.premium", "--type", "autoRenewable", "--apple-id", "erin@icloud", "--app-account-token", erin.appAccountToken,
                "--offer", signed.stdout, "--json"
            ).decode(SimPurchase.Result.self)
            let payload = try JSONValue(parsing: try #require(SignedPayloadVerifier.unverifiedPayload(bought.signedTransaction)))
            #expect(payload["offerIdentifier"]?.stringValue == "spring")
            #expect(try await iap("offers", "sign", "sub.premium", "winback").status == 1, "not eligible: refused")
            #expect(try await iap("offers", "remove", "sub.premium", "spring").status == 0)
            #expect(try await iap("offers", "list", "sub.premium").stdout.contains("spring") == false)
        }
    }

    @Test func healthExitsTwoWhenAServiceIsUnreachable() async throws {
        var env: [String: String] = [:]
        for service in ["ACCOUNTS", "CATALOG", "VERIFICATION", "FULFILLMENT", "SIM"] { env["IAP_\(service)_ADDR"] = "127.0.0.1:1" }
        let health = try await Self.iap(["health"], env: env)
        #expect(health.status == 2, "\(health.stderr)")
    }

    /// Several instances of a service are checked one by one: one down among two is reported (and exits 2) although a
    /// client over both would still be answered.
    @Test func healthChecksEveryInstanceOfAService() async throws {
        try await SuiteFixture.with { suite in
            var env = suite.environment
            let up = suite.accounts.address
            env["IAP_ACCOUNTS_ADDR"] = up + ",127.0.0.1:1"
            // A patient timeout: every suite of the test run starts at once, and this asks whether instances answer at all.
            let health = try await Self.iap(["health", "--timeout", "30"], env: env)
            #expect(health.status == 2, "\(health.stderr)")
            let rows = health.stdout.split(separator: "\n").filter { $0.hasPrefix("accounts") }
            #expect(
                rows.count == 2 && rows.contains { $0.contains(up) && $0.contains("ok") }
                    && rows.contains { $0.contains("127.0.0.1:1") && $0.contains("down") }, "\(health.stdout)")
            let json = try JSONValue.parseJSON(try await Self.iap(["health", "--json", "--timeout", "30"], env: env).stdout)
            #expect(json["accounts"]?[up]?["status"] == .string("ok") && json["accounts"]?["127.0.0.1:1"] == .null)
            #expect(json["catalog"]?["status"] == .string("ok"), "a service of one instance keeps its shape")
        }
    }

    /// Without `IAP_CONFIG` the session goes under `$XDG_CONFIG_HOME`, else `$HOME/.config`, as the
    /// environment says (not the passwd entry's home).
    @Test func theConfigFileFollowsXDGConfigHomeThenHome() async throws {
        try await SuiteFixture.with { suite in
            let root = FileManager.default.temporaryDirectory.appendingPathComponent("cli-xdg-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: root) }
            var env = suite.environment
            env["HOME"] = root.appendingPathComponent("home").path
            let viaHome = try await Self.iap(["accounts", "register", "homer", "--password", "correct horse battery"], env: env)
            #expect(viaHome.status == 0, "\(viaHome.stderr)")
            #expect(FileManager.default.fileExists(atPath: root.appendingPathComponent("home/.config/iap/config.json").path))
            env["XDG_CONFIG_HOME"] = root.appendingPathComponent("xdg").path
            let viaXDG = try await Self.iap(["accounts", "register", "xavier", "--password", "correct horse battery"], env: env)
            #expect(viaXDG.status == 0, "\(viaXDG.stderr)")
            #expect(FileManager.default.fileExists(atPath: root.appendingPathComponent("xdg/iap/config.json").path))
        }
    }
}

extension JSONValue {
    static func parseJSON(_ text: String) throws -> JSONValue {
        try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
    }
}
