import Foundation
import FulfillmentService
import IAPProtocol
import JSONRPC
import Logging
import PostgresSupport
import RPCTestSupport
import Testing

@Suite struct PostgresStoreTests {
    @Test func migrates() async throws {
        let url = try PostgresURL(try await TestPostgres.newDatabase())
        let store = try await PostgresFulfillmentStore(
            pool: try PostgresPool(url: url, schema: "fulfillment", connections: 2, logger: Logger(label: "t")))
        try store.close()
    }
}
