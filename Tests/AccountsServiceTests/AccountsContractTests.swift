import IAPProtocol
import JSONRPC
import RPCTestSupport
import Testing

@Suite struct AccountsContractTests {
    @Test func everyAccountsMethodKeepsItsContract() async throws {
        // Contract files share one server (and client address): keep the per-address limit out of
        // the way so each file's own failures are all that count.
        let fixture = try await AccountsFixture.start { $0.throttle.addressThreshold = 10_000 }
        defer { Task { await fixture.stop() } }
        let failures = try await ContractHarness.run(
            service: "accounts", port: fixture.port, declared: ContractMethods.accounts,
            variables: [
                "signedAppTransaction": .string(try AccountsFixture.appTransaction("700000000001")),
                "secondAppTransaction": .string(try AccountsFixture.appTransaction("700000000003")),
                "foreignAppTransaction": .string(try AccountsFixture.appTransaction("700000000002", bundleId: "com.example.other")),
            ])
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
    }
}
