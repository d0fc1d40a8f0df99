import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import SuiteTestSupport
import Testing

/// Who may do what: one account's session never reaches another's coins, ledger, entitlements or
/// content; admin methods refuse missing and wrong tokens; secrets never reach the logs; restore storms
/// are exactly-once.
@Suite struct AuthorizationTests {
    @Test func oneAccountCannotReadSpendOrDownloadAnothers() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let bob = try await suite.register("bob")
            let pack = try await suite.buy("alice@icloud", "pack.castle")
            let coins = try await suite.buy("alice@icloud", "coins.100")
            _ = try await suite.redeem(alice.session, receipt: coins.receiptData)
            #expect(try await suite.balance(alice.session) == 100)
            _ = pack

            // Bob sees only his own (empty) state, whatever he presents.
            #expect(try await suite.balance(bob.session) == 0)
            #expect(try await suite.ledger(bob.session).isEmpty)
            #expect(try await suite.entitlements(bob.session).isEmpty)
            let spend = await rpcError {
                try await suite.fulfillment.call(
                    FulfillmentSpendCoins.self,
                    .init(
                        session: bob.session, amount: 1,
                        idempotencyKey: "k"))
            }
            #expect(spend?.code == RPCErrorCode.insufficientFunds.rawValue)
            let read = await rpcError {
                try await suite.fulfillment.call(
                    FulfillmentReadContent.self,
                    .init(
                        session: bob.session, contentId: SuiteFixture.contentId, offset: 0, length: 16))
            }
            #expect(read?.code == RPCErrorCode.forbidden.rawValue)
            let restored = try await suite.fulfillment.call(FulfillmentRestore.self, .init(session: bob.session, receiptData: coins.receiptData))
            #expect(restored.results.allSatisfy { $0.outcome == .ownedByAnotherAccount } && restored.entitlements.isEmpty)
            // No session, a forged one, or an empty one: unauthenticated, nothing read.
            for token in ["", "forged-session-token", alice.session + "x"] {
                let refused = await rpcError { try await suite.fulfillment.call(FulfillmentGetBalance.self, .init(session: token)) }
                #expect(refused?.code == RPCErrorCode.unauthenticated.rawValue)
            }
            #expect(try await suite.balance(alice.session) == 100)
        }
    }

    @Test func adminMethodsRefuseMissingAndWrongTokens() async throws {
        try await SuiteFixture.with { suite in
            for token in [
                "", "admin", SuiteFixture.adminToken.uppercased(), String(SuiteFixture.adminToken.dropLast()), SuiteFixture.adminToken + " ",
            ] {
                let revoke = await rpcError {
                    try await suite.fulfillment.call(
                        FulfillmentRevokeTransaction.self,
                        .init(
                            adminToken: token, transactionId: "1", reason: "x"))
                }
                #expect(revoke?.code == RPCErrorCode.forbidden.rawValue)
                let retire = await rpcError {
                    try await suite.catalog.call(CatalogRetireProduct.self, .init(adminToken: token, productId: "coins.100"))
                }
                #expect(retire?.code == RPCErrorCode.forbidden.rawValue)
            }
            let listed = try await suite.catalog.call(CatalogListProducts.self, .init()).products
            #expect(listed.contains { $0.productId == "coins.100" })
        }
    }

    @Test func passwordsTokensAndSessionsNeverReachTheLogs() async throws {
        let capture = LogCapture()
        try await SuiteFixture.with(logs: capture.factory) { suite in
            let password = "correct horse alice"  // SuiteFixture's password for "alice"
            let alice = try await suite.register("alice")
            let guess = "wrong-guess-7f3a9c"
            _ = await rpcError { try await suite.accounts.call(AccountsLogin.self, .init(username: "alice", password: guess)) }
            let second = try await suite.login("alice")
            let bought = try await suite.buy("alice@icloud", "pack.castle")
            _ = try await suite.redeem(second, receipt: bought.receiptData)
            _ = try await suite.fulfillment.call(
                FulfillmentReadContent.self,
                .init(
                    session: second, contentId: SuiteFixture.contentId,
                    offset: 0, length: 64))
            _ = await rpcError {
                try await suite.fulfillment.call(
                    FulfillmentSpendCoins.self,
                    .init(
                        session: alice.session, amount: 5,
                        idempotencyKey: "k"))
            }
            let wrongAdmin = "wrong-admin-token-5d1e"
            _ = await rpcError { try await suite.catalog.call(CatalogRetireProduct.self, .init(adminToken: wrongAdmin, productId: "coins.100")) }
            _ = try await suite.fulfillment.call(
                FulfillmentRevokeTransaction.self,
                .init(
                    adminToken: SuiteFixture.adminToken,
                    transactionId: bought.transactionId, reason: "test"))
            _ = try await suite.accounts.call(AccountsLogout.self, .init(session: second))
            _ = await rpcError { try await suite.fulfillment.call(FulfillmentGetBalance.self, .init(session: second)) }

            let lines = capture.all
            // The capture works: the services' own lines about this flow are there.
            #expect(
                lines.contains { $0.contains("account registered") } && lines.contains { $0.contains("revoked by an administrator") },
                "\(lines)")
            for secret in [password, guess, alice.session, second, SuiteFixture.adminToken, wrongAdmin] {
                let leaks = lines.filter { $0.contains(secret) }
                #expect(leaks.isEmpty, "a secret reached the logs: \(leaks.prefix(2))")
            }
        }
    }

    @Test func restoreStormsAreExactlyOnce() async throws {
        try await SuiteFixture.with { suite in
            let alice = try await suite.register("alice")
            let bob = try await suite.register("bob")
            _ = try await suite.buy("alice@icloud", "pack.castle")
            _ = try await suite.buy("alice@icloud", "sub.premium")
            let restore = try await suite.simulator.call(SimRestore.self, .init(appleId: "alice@icloud", bundleId: SuiteFixture.bundleId))
            let outcomes = try await withThrowingTaskGroup(of: [RedeemOutcome].self) { group in
                for i in 0..<150 {
                    let session = i % 3 == 2 ? bob.session : alice.session
                    group.addTask {
                        try await suite.fulfillment.call(FulfillmentRestore.self, .init(session: session, receiptData: restore.receiptData))
                            .results.map(\.outcome)
                    }
                }
                var all: [RedeemOutcome] = []
                for try await o in group { all += o }
                return all
            }
            // Four transactions (two originals, two restored copies): each processed once, by one account.
            #expect(try await suite.count("SELECT COUNT(*) FROM processedTransaction") == 4)
            #expect(try await suite.count("SELECT COUNT(*) FROM ownership") == 2)
            #expect(try await suite.count("SELECT COUNT(*) FROM entitlement") == 2)
            #expect(outcomes.filter { $0 == .granted }.count == 2)
            // Whoever restored first owns both originals; the other account owns nothing.
            let aliceOwns = Set(try await suite.entitlements(alice.session).map(\.entitlement))
            let bobOwns = Set(try await suite.entitlements(bob.session).map(\.entitlement))
            #expect((aliceOwns == ["castle", "premium"] && bobOwns.isEmpty) || (bobOwns == ["castle", "premium"] && aliceOwns.isEmpty))
        }
    }
}
