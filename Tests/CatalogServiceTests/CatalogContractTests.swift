import IAPProtocol
import RPCTestSupport
import Testing

@Suite struct CatalogContractTests {
    @Test func everyCatalogMethodKeepsItsContract() async throws {
        // Each contract file gets a fresh service seeded with the standard catalog.
        let failures = try await ContractHarness.run(service: "catalog", declared: ContractMethods.catalog) {
            try await CatalogFixture.start().target
        }
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
    }
}
