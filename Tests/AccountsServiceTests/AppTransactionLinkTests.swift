import IAPProtocol
import JSONRPC
import RPCTestSupport
import Testing

/// accounts.linkAppTransaction's bounds, over TCP against a real accounts service and its store (SQLite, or PostgreSQL
/// with IAP_TEST_ENGINE=postgres): an account links to at most 10 Apple customers, a customer to at most 20 accounts of
/// one environment; linking again is free; a Sandbox app transaction naming the same id takes none of Production's places.
@Suite struct AppTransactionLinkTests {
    @Test func linksAreBoundedPerAccountAndPerCustomerAndEnvironment() async throws {
        let fixture = try await AccountsFixture.start()
        defer { Task { await fixture.stop() } }
        func link(_ session: String, _ id: String, environment: String = "Production") async throws -> String {
            try await fixture.client.call(
                AccountsLinkAppTransaction.self,
                .init(session: session, signedAppTransaction: try AccountsFixture.appTransaction(id, environment: environment))
            ).appTransactionId
        }
        // One account, ten customers; the eleventh is refused, a customer it has is linked again.
        let family = try await fixture.register("links-family")
        for i in 1...10 { #expect(try await link(family.session.token, "70000000010\(i - 1)") == "70000000010\(i - 1)") }
        let eleventh = await rpcError { try await link(family.session.token, "700000000199") }
        #expect(eleventh?.knownCode == .conflict && eleventh?.reason == "tooManyLinks")
        #expect(try await link(family.session.token, "700000000100") == "700000000100")
        // One customer, twenty accounts; the twenty-first is refused in Production, not in Sandbox.
        var sessions: [String] = []
        for i in 0..<21 { sessions.append(try await fixture.register("links-\(i)").session.token) }
        for session in sessions.prefix(20) { _ = try await link(session, "700000000500") }
        let crowded = await rpcError { try await link(sessions[20], "700000000500") }
        #expect(crowded?.knownCode == .conflict && crowded?.reason == "tooManyLinks")
        #expect(try await link(sessions[20], "700000000500", environment: "Sandbox") == "700000000500")
        let customer = try await fixture.client.call(
            AccountsAppleCustomer.self, .init(internalToken: AccountsFixture.internalToken, appTransactionId: "700000000500"))
        #expect(customer.links.filter { $0.environment == "Production" }.count == 20 && customer.links.count == 21)
    }
}
