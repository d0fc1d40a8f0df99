import ArgumentParser
import AsyncHTTPClient
import Foundation
import IAPProtocol
import JSONRPC
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import RPCTransport
import ServiceSupport

/// HTTP clients for the edge scenarios: one `HTTPClient` per connection (so `--connections` is the number
/// of TCP connections, HTTP/2 or not), trusting `--ca` besides the system's roots.
struct HTTPLoadOptions: ParsableArguments {
    @Option(help: "PEM certificate authority of the server's certificate (HTTPS).") var ca: String?
    @Flag(help: "HTTP/1.1 only (default: HTTP/2 when TLS negotiates it).") var http1 = false

    func clients(_ count: Int, perConnection: Int) throws -> [HTTPClient] {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let ca { tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMFile(ca))] }
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
        configuration.httpVersion = http1 ? .http1Only : .automatic
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: perConnection)
        configuration.decompression = .disabled
        return (0..<count).map { _ in HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration) }
    }
}

/// `catalog.listProducts` through the edge (`POST /v1/rpc`): the same call as `catalog-list`, over HTTP(S).
struct EdgeRPCBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "edge-rpc", abstract: "catalog.listProducts as JSON-RPC over HTTP(S) through the edge (compare: catalog-list).")
    @Option(help: "The edge's base URL.") var url = "https://localhost:8443"
    @OptionGroup var http: HTTPLoadOptions
    @OptionGroup var load: LoadOptions

    func run() async throws {
        let pool = try http.clients(load.connections, perConnection: load.inFlight)
        let driver = LoadDriver(options: load)
        let body = ByteBuffer(
            bytes: Array(#"{"jsonrpc":"2.0","id":1,"method":"catalog.listProducts","params":{"storefront":"USA","locale":"en-US"}}"#.utf8))
        let endpoint = url + "/v1/rpc"
        let report = try await driver.run(
            scenario: "edge-rpc (\(url.hasPrefix("https") ? "HTTPS" : "HTTP")\(http.http1 ? ", HTTP/1.1" : ""))", clients: pool
        ) { client, _ in
            await postJSON(client, endpoint, body) { $0.readableBytesView.starts(with: Array(#"{"jsonrpc":"2.0","id":1,"result""#.utf8)) }
        }
        driver.print(report)
        for c in pool { try? await c.shutdown() }
    }
}

/// Downloads one file over and over (`GET`, whole body, discarded as it arrives) and reports MiB/s:
/// the edge's signed content URLs against any other server of the same file (nginx).
struct DownloadBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "download", abstract: "GET one file repeatedly; MiB/s (edge content URLs vs nginx on the same file).")
    @Option(help: "The file's URL (for the edge: a signed URL, see `iap-bench content-url`).") var url: String
    @Option(help: "A label for the report.") var label = "download"
    @OptionGroup var http: HTTPLoadOptions
    @OptionGroup var load: LoadOptions

    func run() async throws {
        let pool = try http.clients(load.connections, perConnection: load.inFlight)
        let driver = LoadDriver(options: load)
        let bytes = ByteCounter()
        let target = url
        var report = try await driver.run(scenario: label, clients: pool) { client, _ in
            do {
                let response = try await client.execute(HTTPClientRequest(url: target), timeout: .seconds(600))
                guard response.status == .ok else { return .failed(code: Int(response.status.code)) }
                var received = 0
                for try await chunk in response.body { received += chunk.readableBytes }
                bytes.add(received)
                return .ok
            } catch {
                return .failed(code: CallOutcome.otherError)
            }
        }
        // Every request downloads the whole file: MiB/s = file size x measured requests / seconds.
        let perFile = Double(bytes.value) / Double(max(1, bytes.count))
        report.notes["MiB/s"] = String(format: "%.1f", perFile * Double(report.requests) / report.seconds / 1_048_576)
        report.notes["file MiB"] = String(format: "%.1f", perFile / 1_048_576)
        driver.print(report)
        for c in pool { try? await c.shutdown() }
    }
}

/// Bytes and requests counted across the download workers.
final class ByteCounter: Sendable {
    private let state = NIOLockedValueBox((bytes: 0, count: 0))
    func add(_ n: Int) {
        state.withLockedValue {
            $0.bytes += n; $0.count += 1
        }
    }
    var value: Int { state.withLockedValue { $0.bytes } }
    var count: Int { state.withLockedValue { $0.count } }
}

/// Prints a signed content URL (what `fulfillment.contentURL` answers) for a benchmark account, good for
/// an hour, so a download benchmark can run against the edge without the rest of the suite.
struct ContentURLCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "content-url", abstract: "Sign a content URL for the edge.")
    @Option(help: "The edge's base URL.") var base = "https://localhost:8443"
    @Option(name: .customLong("content-id")) var contentId: String
    @Option(help: "The content URL key (default: IAP_CONTENT_URL_KEY).") var key: String?

    func run() throws {
        guard let key = key ?? Environment.value("IAP_CONTENT_URL_KEY") else { throw ValidationError("--key or IAP_CONTENT_URL_KEY") }
        let grant = ContentURLSigner.Grant(
            contentId: contentId, accountId: "benchmark", scope: "Production",
            expiresAtMs: Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000)
        print(base + ContentURLSigner(key: key).path(for: grant))
    }
}

/// Apple's webhook through the edge (`POST /v1/notifications/appstore`): each notification a new signed
/// REFUND (of a purchase minted before timing), answered 200 only once fulfillment has recorded it durably
/// (and, today, processed it: the standing of the transaction fetched from the App Store Server API).
struct WebhookBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webhook", abstract: "App Store Server Notifications accepted per second through the edge (needs the running suite).")
    @Option(help: "The edge's base URL.") var url = "https://localhost:8443"
    @Option(help: "Notifications to mint before timing (the run stops early if it uses them all).") var notifications = 10_000
    @OptionGroup var suite: SuiteAddresses
    @OptionGroup var http: HTTPLoadOptions
    @OptionGroup var load: LoadOptions

    func run() async throws {
        try await suite.silenceSimulatorNotifications()
        let runId = String(UUID().uuidString.prefix(8)).lowercased()
        FileHandle.standardError.write(Data("minting \(notifications) purchases and their refunds...\n".utf8))
        let minted = try await suite.mint(count: notifications, productId: "coins.100", type: .consumable, run: runId)
        let sim = try RPCClient(address: suite.sim, configuration: .init(connections: 4, callTimeout: .seconds(60)))
        let payloads = try await inParallel(minted.count) { i in
            try await sim.call(SimRefund.self, .init(appleId: "bench-\(runId)-\(i)@icloud", transactionId: minted[i].transactionId)).signedPayload
        }
        await sim.close()
        let bodies = payloads.map { payload in
            ByteBuffer(bytes: (try? JSONSerialization.data(withJSONObject: ["signedPayload": payload ?? ""])) ?? Data())
        }
        let pool = try http.clients(load.connections, perConnection: load.inFlight)
        let driver = LoadDriver(options: load)
        let endpoint = url + "/v1/notifications/appstore"
        let report = try await driver.run(
            scenario: "webhook (\(url.hasPrefix("https") ? "HTTPS" : "HTTP")\(http.http1 ? ", HTTP/1.1" : ""), a new REFUND each)", clients: pool,
            notes: ["durable": "200 only once recorded in fulfillment's inbox (synchronous=FULL)"]
        ) { client, i in
            guard i < bodies.count else { return nil }
            return await postJSON(client, endpoint, bodies[i]) { _ in true }
        }
        driver.print(report)
        for c in pool { try? await c.shutdown() }
    }
}

/// `body(i)` for every i in 0..<count, eight at a time, in index order (benchmarks mint their inputs this way).
func inParallel<T: Sendable>(_ count: Int, _ body: @escaping @Sendable (Int) async throws -> T) async throws -> [T] {
    let next = NIOLockedValueBox(0)
    return try await withThrowingTaskGroup(of: [(Int, T)].self) { group in
        for _ in 0..<8 {
            group.addTask {
                var out: [(Int, T)] = []
                while true {
                    let i = next.withLockedValue { v in
                        defer { v += 1 }; return v
                    }
                    guard i < count else { return out }
                    out.append((i, try await body(i)))
                }
            }
        }
        var all: [(Int, T)] = []
        for try await part in group { all += part }
        return all.sorted { $0.0 < $1.0 }.map(\.1)
    }
}

/// One POST of a JSON body: `.ok` for a 200 whose body `accepts`, else the status (or a transport failure).
func postJSON(_ client: HTTPClient, _ url: String, _ body: ByteBuffer, accepts: (ByteBuffer) -> Bool) async -> CallOutcome {
    var request = HTTPClientRequest(url: url)
    request.method = .POST
    request.headers.add(name: "Content-Type", value: "application/json")
    request.body = .bytes(body)
    do {
        let response = try await client.execute(request, timeout: .seconds(30))
        let answer = try await response.body.collect(upTo: 1 << 20)
        return response.status == .ok && accepts(answer) ? .ok : .failed(code: Int(response.status.code))
    } catch {
        return .failed(code: CallOutcome.otherError)
    }
}
