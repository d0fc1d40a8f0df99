import ArgumentParser
import Foundation
import IAPProtocol
import JSONRPC
import ServiceSupport

/// `iap demo`: the whole story against the running suite, step by step.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Walk through register, catalog, purchase, redeem, download, restore on a second device, spend and refund.",
        discussion: "Needs the suite running (compose/up.sh). Uses a fresh account and simulated Apple ID; your saved session is left alone.")
    @Option(name: .customLong("coins-product"), help: "Consumable to buy.") var coinsProduct = "coins.100"
    @Option(name: .customLong("content-product"), help: "Non-consumable with downloadable content.") var contentProduct = "levels.pack1"
    @Option(name: .customLong("bundle-id"), help: "App bundle id (default: the first of IAP_BUNDLE_IDS, else com.example.game).")
    var bundleIdOption: String?
    @Option(name: .customLong("download-dir"), help: "Where to save the downloaded content (default: a temporary directory).")
    var downloadDir: String?
    @Option(help: "Coins to spend.") var spend: Int64 = 30

    func run() async throws {
        let bundleId = bundleIdOption ?? defaultBundleId()
        let call = ServiceCall()
        let id = String(UUID().uuidString.prefix(8)).lowercased()
        let username = "demo-\(id)"
        let password = "demo passphrase \(id)"
        let appleId = "demo-\(id)@icloud.example"
        var step = 0
        func heading(_ text: String) {
            step += 1
            print("\n== \(step). \(text)")
        }

        heading("register \(username)")
        let (signedIn, _) = await call.call(.accounts, AccountsRegister.self, .init(username: username, password: password, deviceName: "phone"))
        print("account \(signedIn.accountId), appAccountToken \(signedIn.appAccountToken)")
        let phone = signedIn.session.token
        /// A simulated App Store purchase of `product` for the demo's Apple ID and account.
        func buy(_ product: Product, _ environment: SimEnvironment) async -> (SimPurchase.Result, [UInt8]) {
            await call.call(
                .sim, SimPurchase.self,
                .init(
                    appleId: appleId, bundleId: bundleId, productId: product.productId, productType: product.type,
                    appAccountToken: signedIn.appAccountToken, environment: environment))
        }

        heading("what the app sells (catalog.listProducts, USA)")
        let (listing, _) = await call.call(.catalog, CatalogListProducts.self, .init(storefront: "USA"))
        print(CatalogCommand.rows(listing.products))
        guard let coins = listing.products.first(where: { $0.productId == coinsProduct }),
            let pack = listing.products.first(where: { $0.productId == contentProduct }),
            case .content(_, let contentIds) = pack.grant, let contentId = contentIds.first
        else {
            fail(
                "the catalog has no \(coinsProduct) or no \(contentProduct) with content; import compose/demo-catalog.json "
                    + "(iap catalog import compose/demo-catalog.json) or pass --coins-product / --content-product", exit: ExitCodes.refused)
        }

        heading("buy \(coins.title) in the App Store simulator (app \(bundleId), Production)")
        let (coinPurchase, _) = await buy(coins, .production)
        print("transaction \(coinPurchase.transactionId), environment \(coinPurchase.environment)")

        heading("redeem the receipt (fulfillment.redeem)")
        let (redeemed, _) = await call.call(.fulfillment, FulfillmentRedeem.self, .init(session: phone, receiptData: coinPurchase.receiptData))
        print(redeemSummary(redeemed))
        _ = await call.call(.sim, SimFinishTransaction.self, .init(appleId: appleId, transactionId: coinPurchase.transactionId))
        print("finished \(coinPurchase.transactionId) in the simulator (the grant was committed first)")

        heading("redeem the same receipt again: nothing is granted twice")
        let (again, _) = await call.call(.fulfillment, FulfillmentRedeem.self, .init(session: phone, receiptData: coinPurchase.receiptData))
        print(
            again.results.isEmpty
                ? "no unfinished purchases in the receipt; balance \(again.balance)"
                : "outcomes: \(again.results.map(\.outcome.rawValue).joined(separator: ", ")); balance \(again.balance)")

        heading("a TestFlight (Sandbox) purchase: free to make, so it never becomes production coins")
        let (sandboxPurchase, _) = await buy(coins, .sandbox)
        let (sandboxRedeemed, _) = await call.call(
            .fulfillment, FulfillmentRedeem.self,
            .init(session: phone, signedTransactions: [sandboxPurchase.signedTransaction]))
        print(redeemSummary(sandboxRedeemed))
        let (production, _) = await call.call(.fulfillment, FulfillmentGetBalance.self, .init(session: phone))
        print("production: \(production.balance) coins (unchanged; the Sandbox scope has its own balance)")

        heading("buy \(pack.title) and redeem it")
        let (packPurchase, _) = await buy(pack, .production)
        let (packRedeemed, _) = await call.call(
            .fulfillment, FulfillmentRedeem.self,
            .init(session: phone, signedTransactions: [packPurchase.signedTransaction]))
        print(redeemSummary(packRedeemed))

        heading("download \(contentId)")
        let dir = downloadDir ?? FileManager.default.temporaryDirectory.appendingPathComponent("iap-demo-\(id)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let destination = dir + "/" + contentId
        let summary = try await ContentDownload(
            call: call, session: phone, contentId: contentId, destination: destination,
            chunk: 256 * 1024
        ).run()
        print("saved \(destination): \(summary.size) bytes, sha256 \(summary.sha256) verified")

        heading("a second device: sign in and restore purchases")
        let (tablet, _) = await call.call(.accounts, AccountsLogin.self, .init(username: username, password: password, deviceName: "tablet"))
        let (restore, _) = await call.call(.sim, SimRestore.self, .init(appleId: appleId, bundleId: bundleId))
        let (restored, _) = await call.call(
            .fulfillment, FulfillmentRestore.self,
            .init(session: tablet.session.token, receiptData: restore.receiptData))
        print(redeemSummary(restored))
        print("(restores never grant coins: the balance is what the phone had)")

        heading("spend \(spend) coins on the second device")
        let (spent, _) = await call.call(
            .fulfillment, FulfillmentSpendCoins.self,
            .init(
                session: tablet.session.token, amount: spend, idempotencyKey: "demo-\(id)-spend", memo: "demo purchase"))
        print("balance \(spent.balance) (\(spent.environment.rawValue))")

        heading("Apple refunds the coins: the App Store notification reaches fulfillment")
        let (refund, _) = await call.call(.sim, SimRefund.self, .init(appleId: appleId, transactionId: coinPurchase.transactionId))
        guard let payload = refund.signedPayload else { fail("the simulator sent no notification", exit: ExitCodes.refused) }
        if let edge = call.edgeClient() {
            // As Apple delivers it: POSTed to the edge's webhook, answered 200 once fulfillment recorded it.
            let status = try await edge.postNotification(payload)
            await edge.shutdown()
            guard status == 200 else { fail("the edge's webhook answered HTTP \(status)", exit: ExitCodes.refused) }
            print("POST \(edge.base)/v1/notifications/appstore: HTTP \(status) (recorded and applied)")
        } else {
            let token = try resolveToken(nil, env: "IAP_INTERNAL_TOKEN", file: "internal-token")
            let (applied, _) = await call.call(
                .fulfillment, FulfillmentApplyNotification.self, .init(signedPayload: payload, internalToken: token))
            print("notification applied: \(applied.applied)")
        }
        let (afterRefund, _) = await call.call(.fulfillment, FulfillmentGetBalance.self, .init(session: phone))
        print(balanceLine(afterRefund.balance, owed: afterRefund.owed, afterRefund.environment))

        heading("buy coins again: what is owed is repaid before anything is spendable")
        let (rebuy, _) = await buy(coins, .production)
        let (rebought, _) = await call.call(
            .fulfillment, FulfillmentRedeem.self, .init(session: phone, signedTransactions: [rebuy.signedTransaction]))
        print(redeemSummary(rebought))
        let (ledger, _) = await call.call(.fulfillment, FulfillmentListLedger.self, .init(session: phone, limit: 100))
        print(
            table(
                ["id", "kind", "delta", "balance", "owed", "memo"],
                ledger.entries.map {
                    [String($0.id), $0.kind.rawValue, String($0.delta), String($0.balance), String($0.owed ?? 0), $0.memo ?? ""]
                }))

        // Google Play when its simulator runs (IAP_PLAY_ADDR, set by compose/up.sh): the same account on an Android phone.
        var android = ""
        if Environment.value(SuiteService.play.environmentVariable) != nil {
            heading("an Android phone: the same account buys \(coins.title) on Google Play and redeems the purchase token")
            let (droid, _) = await call.call(.accounts, AccountsLogin.self, .init(username: username, password: password, deviceName: "android"))
            // The app passes the account's appAccountToken to BillingFlowParams.setObfuscatedAccountId.
            let (bought, _) = await call.call(
                .play, PlayPurchaseProduct.self,
                .init(
                    packageName: bundleId, productId: coins.productId, obfuscatedExternalAccountId: signedIn.appAccountToken, productType: .inapp))
            print("Google Play order \(bought.orderId ?? "-"), purchase token \(bought.purchaseToken.prefix(16))...")
            let (playRedeemed, _) = await call.call(
                .fulfillment, FulfillmentRedeem.self,
                .init(session: droid.session.token, googlePlay: [.init(productId: coins.productId, purchaseToken: bought.purchaseToken)]))
            print(redeemSummary(playRedeemed))
            print("one balance across both stores: \(playRedeemed.balance) coins (Google Play)")
            android = ", bought on an Android phone into the same balance"
        }

        print(
            "\ndemo complete: \(username) bought, redeemed once, kept a Sandbox purchase apart, downloaded, restored on a second device, "
                + "spent, was refunded, and repaid the refunded coins from the next purchase\(android).")
    }
}
