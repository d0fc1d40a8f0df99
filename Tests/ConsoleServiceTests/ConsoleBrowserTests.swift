import ConsoleService
import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import SuiteTestSupport
import Testing

/// The support console in a real browser: Debian's headless Chromium driven by Selenium (`Tests/Judges/console_browser_judge.py`)
/// against a live suite. It signs in (a wrong password and a wrong code refused), finds one customer by each kind of id,
/// reads the balance, debt and ledger that fulfillment holds, gives 50 coins and revokes a purchase through the
/// confirmation step, and checks what a viewer, a forged form and a hostile username get. The test then asks fulfillment
/// itself what those actions left: the adjustment row, the audit entries naming the operator, the revoked purchase.
@Suite(.enabled(if: Judges.available && (Judges.required || FileManager.default.isExecutableFile(atPath: "/usr/bin/chromedriver"))))
struct ConsoleBrowserTests {
    struct Verdict: Decodable {
        struct Seen: Decodable {
            var found: [String: String?]?
            var ledger: [[String]]?
            var pageAfter: String?
        }
        var seen: Seen
        var failures: [String]
    }

    static let hostile = "<img/src=x/onerror=alert(1)>"

    @Test func anOperatorFindsReadsAndActsOnACustomerInARealBrowser() async throws {
        let python = try #require(Judges.python, "no judges' virtual environment: run scripts/test (IAP_REQUIRE_JUDGES=1)")
        try await SuiteFixture.with { suite in
            let console = try await ConsoleFixture.start(suite)
            defer { Task { await console.stop() } }
            let support = try await console.addOperator("sam", .support)
            let viewer = try await console.addOperator("vic", .viewer)
            let adminOperator = try await console.addOperator("ada", .admin)

            // A customer whose username is markup: 100 coins, the castle pack, and 100 more coins to revoke.
            let customer = try await suite.register(Self.hostile)
            let coins = try await suite.buy("browser@icloud", "coins.100")
            let pack = try await suite.buy("browser@icloud", "pack.castle")
            let extra = try await suite.buy("browser@icloud", "coins.100")
            for purchase in [coins, pack, extra] { _ = try await suite.redeem(customer.session, receipt: purchase.receiptData) }
            // One bought with StoreKit 2 at 0.99 USD: its signed transaction carries the price; the receipts' three do not.
            let priced = try await suite.simulator.call(
                SimPurchase.self,
                .init(
                    appleId: "browser@icloud", bundleId: SuiteFixture.bundleId, productId: "coins.100", productType: .consumable, price: 990,
                    currency: "USD"))
            _ = try await suite.redeem(customer.session, signed: [priced.signedTransaction])
            let admin = SuiteFixture.adminToken
            let before = try await suite.fulfillment.call(FulfillmentGetCustomer.self, .init(adminToken: admin, accountId: customer.accountId))
            let production = try #require(before.scopes.first)

            let shots = FileManager.default.temporaryDirectory.appendingPathComponent("console-screenshots-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: shots, withIntermediateDirectories: true)
            let reason = "ticket 42 \(Self.hostile)"
            let config: [String: Any] = [
                "url": console.url, "screenshots": shots.path, "reason": reason, "revoke": extra.transactionId,
                "overview": ["purchases": "4", "unpriced": "3", "revenueUSD": "0.99"],
                "support": ["name": "sam", "password": support.password, "totpSecret": support.totpSecret],
                "viewer": ["name": "vic", "password": viewer.password, "totpSecret": viewer.totpSecret],
                "admin": ["name": "ada", "password": adminOperator.password, "totpSecret": adminOperator.totpSecret],
                "customer": [
                    "accountId": customer.accountId, "username": Self.hostile, "balance": production.balance, "owed": production.owed,
                    "ledger": production.ledger.map { ["kind": $0.kind.rawValue, "delta": $0.delta, "balance": $0.balance] },
                    "ids": [
                        "username": Self.hostile, "accountId": customer.accountId, "appAccountToken": customer.appAccountToken,
                        "transactionId": coins.transactionId, "originalTransactionId": pack.originalTransactionId, "orderId": pack.orderId ?? "",
                    ],
                ],
            ]
            let configFile = shots.appendingPathComponent("config.json")
            try JSONSerialization.data(withJSONObject: config).write(to: configFile)
            let run = try await Subprocess.run(python, [Judges.script("console_browser_judge.py"), configFile.path])
            try #require(run.status == 0, "the browser judge failed: \(run.stderr.suffix(3000))")
            let verdict = try JSONDecoder().decode(Verdict.self, from: Data(run.stdout.utf8))
            #expect(verdict.failures.isEmpty, "\(verdict.failures.joined(separator: "\n"))")
            #expect(verdict.seen.found?.count == 6)
            for name in ["overview.png", "customer.png", "customer-after.png"] {
                #expect(FileManager.default.fileExists(atPath: shots.appendingPathComponent(name).path), "no screenshot \(name)")
            }
            print("console screenshots: \(shots.path)")

            // What fulfillment itself says the actions left.
            let after = try await suite.fulfillment.call(FulfillmentGetCustomer.self, .init(adminToken: admin, accountId: customer.accountId))
            let adjustment = try #require(after.scopes[0].ledger.first { $0.kind == .adjustment })
            #expect(adjustment.delta == 50 && adjustment.memo == "support adjustment", "the reason stays out of the customer's ledger")
            #expect(after.purchases.first { $0.transactionId == extra.transactionId }?.state == .revoked)
            #expect(after.scopes[0].balance == production.balance + 50 - 100, "50 given, the revoked purchase's 100 taken back")
            #expect(after.purchases.first { $0.transactionId == priced.transactionId }.map { [$0.price, $0.currency == "USD" ? 1 : 0] } == [990, 1])
            let audit = try await suite.fulfillment.call(FulfillmentListAudit.self, .init(adminToken: admin, accountId: customer.accountId))
            #expect(Set(audit.entries.map(\.action)) == ["adjustCoins", "revoke", "signOutCustomer"], "\(audit.entries.map(\.action))")
            await #expect(throws: RPCError.self, "signed out of every device") {
                try await suite.fulfillment.call(FulfillmentGetBalance.self, .init(session: customer.session))
            }
            #expect(audit.entries.allSatisfy { $0.operatorName == "sam" }, "every action names its operator")
            // The forged and the viewer's POSTs did nothing: one adjustment only.
            #expect(after.scopes[0].ledger.filter { $0.kind == .adjustment }.count == 1)
            // The console's own log: sign-ins refused and accepted, the actions, the refusals.
            let log = try await console.store.audit(operatorName: nil, action: nil, limit: 100).map(\.action)
            #expect(log.filter { $0 == "signInRefused" }.count == 2 && log.contains("csrfRefused") && log.contains("actionRefused"), "\(log)")
            let newbie = try await console.store.operatorRecord("newbie")
            let repriced = try await suite.catalog.call(CatalogGetProducts.self, .init(productIds: ["coins.100"], storefront: "DEU"))
            #expect(repriced.products.first?.price.map { "\($0.amount) \($0.currency)" } == "1.19 EUR", "the admin's prices reached the catalog")
            #expect(log.contains("addOperator") && log.contains("setRole") && newbie?.role == .support)
        }
    }
}
