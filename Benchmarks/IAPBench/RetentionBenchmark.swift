import ArgumentParser
import AsyncHTTPClient
import Foundation
import IAPProtocol
import JSONRPC
import NIOConcurrencyHelpers
import NIOCore
import RPCTransport

/// Apple's Get Retention Message requests answered per second through the edge, and their latency (Apple waits about
/// 700 ms before it shows the default message): each a new request signed by the simulated App Store for a subscription
/// of its own, verified, decided from the catalog's rules and recorded once in fulfillment.
struct RetentionBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "retention", abstract: "Retention Messaging requests answered per second through the edge, and p99 (needs the running suite).")
    @Option(help: "The edge's base URL.") var url = "https://localhost:8443"
    @Option(help: "Requests to sign before timing (the run stops early if it uses them all).") var requests = 5_000
    @Option(help: "An auto-renewable product of the catalog.") var product = "pro.monthly"
    @Option(help: "catalog-service address (the rules are set there first).") var catalog = SuiteAddresses.env("IAP_CATALOG_ADDR", "127.0.0.1:7102")
    @OptionGroup var admin: AdminTokenOptions
    @OptionGroup var suite: SuiteAddresses
    @OptionGroup var http: HTTPLoadOptions
    @OptionGroup var load: LoadOptions

    func run() async throws {
        let catalogClient = try RPCClient(address: catalog, configuration: .init(connections: 1, callTimeout: .seconds(30)))
        let message = "0f6e1c2a-9b1d-4c59-8a55-0e1b2c3d4e5f"
        try await catalogClient.call(
            CatalogSetRetention.self,
            .init(
                adminToken: try admin.resolved, productId: product,
                retention: RetentionRules(
                    choices: [
                        .init(id: "loyal", kind: .message, messageIdentifier: message, when: .init(minRenewals: 3)),
                        .init(id: "stay", kind: .message, messageIdentifier: message, locales: ["en"]),
                    ], defaultMessageIdentifier: message)))
        await catalogClient.close()
        let runId = String(UUID().uuidString.prefix(8)).lowercased()
        FileHandle.standardError.write(Data("minting \(requests) subscriptions and signing their realtime requests...\n".utf8))
        let minted = try await suite.mint(count: requests, productId: product, type: .autoRenewable, run: runId)
        let sim = try RPCClient(address: suite.sim, configuration: .init(connections: 4, callTimeout: .seconds(60)))
        // Signed without being sent: the simulated App Store sends nothing while no realtime URL is set.
        try await sim.call(SimSetRealtimeURL.self, .init(environment: .production))
        let payloads = try await inParallel(minted.count) { i in
            try await sim.call(
                SimCancelIntent.self,
                .init(appleId: "bench-\(runId)-\(i)@icloud", originalTransactionId: minted[i].originalTransactionId, locale: "en-US")
            ).signedPayload
        }
        await sim.close()
        let bodies = payloads.map { payload in
            ByteBuffer(bytes: (try? JSONSerialization.data(withJSONObject: ["signedPayload": payload])) ?? Data())
        }
        let pool = try http.clients(load.connections, perConnection: load.inFlight)
        let driver = LoadDriver(options: load)
        let endpoint = url + "/v1/retention/appstore"
        let report = try await driver.run(
            scenario: "retention (\(url.hasPrefix("https") ? "HTTPS" : "HTTP")\(http.http1 ? ", HTTP/1.1" : ""), a new realtime request each)",
            clients: pool, notes: ["answer": "verified, decided from the catalog's rules, recorded once (synchronous=FULL)"]
        ) { client, i in
            guard i < bodies.count else { return nil }
            return await postJSON(client, endpoint, bodies[i]) { String(buffer: $0).contains(message) }
        }
        driver.print(report)
        for c in pool { try? await c.shutdown() }
    }
}
