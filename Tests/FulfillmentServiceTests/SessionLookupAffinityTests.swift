import FulfillmentService
import IAPProtocol
import JSONRPC
import Logging
import RPCTestSupport
import RPCTransport
import Testing

/// Fulfillment asks accounts who a session is on every request; with several accounts instances, each session's
/// questions go to one of them (its cache of sessions then answers), and sessions spread over the instances.
@Suite struct SessionLookupAffinityTests {
    @Test func aSessionsLookupsGoToOneAccountsInstance() async throws {
        var quiet = Logger(label: "accounts-stub")
        quiet.logLevel = .critical
        var servers: [RPCServer] = []
        for name in ["a", "b", "c"] {
            var router = RPCRouter()
            router.registerImmediate(AccountsAuthenticate.self) { params, _ in
                AuthenticatedAccount(accountId: name, username: params.session, appAccountToken: "", expiresAtMs: 0)
            }
            let server = RPCServer(configuration: RPCServerConfiguration(serviceName: name), router: router, logger: quiet)
            try await server.start()
            servers.append(server)
        }
        let instances = servers
        defer { Task { for server in instances { await server.shutdown() } } }
        let elsewhere = "127.0.0.1:\(try LoopbackPort.free())"
        let dependencies = try Dependencies(
            accounts: instances.map { "127.0.0.1:\($0.localPort!)" }.joined(separator: ","), verification: elsewhere, catalog: elsewhere,
            connections: 2)
        defer {
            Task {
                await dependencies.accounts.close(); await dependencies.verification.close(); await dependencies.catalog.close()
            }
        }
        var firsts: Set<String> = []
        for n in 0..<30 {
            let session = String(repeating: "S", count: 40) + String(1000 + n).suffix(3)  // a session token's shape
            var seen: Set<String> = []
            for _ in 0..<6 { seen.insert(try await dependencies.authenticate(session).accountId) }
            #expect(seen.count == 1, "\(session): \(seen)")
            firsts.formUnion(seen)
        }
        #expect(firsts == ["a", "b", "c"])
        // Not a session token's shape (a guess): round-robin, so a made-up key cannot aim lookups at one instance.
        var seen: Set<String> = []
        for _ in 0..<6 { seen.insert(try await dependencies.authenticate("made-up").accountId) }
        #expect(seen == ["a", "b", "c"])
    }
}
