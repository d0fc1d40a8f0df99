import AppStoreServerAPI
import AppStoreSimulator
import AsyncHTTPClient
import Crypto
import Foundation
import IAPProtocol
import JSONRPC
import Logging
import NIOConcurrencyHelpers
import NIOPosix
import RPCTestSupport
import Receipts
import ServiceSupport
import Testing
import X509

/// The simulator's App Store Server API over real HTTP, and the shared client against it.
@Suite struct AppStoreServerAPITests {
    static let bundleId = "com.example.game"

    /// The simulator with its HTTP endpoints (verifyReceipt and /inApps) on a free port.
    struct Served {
        let simulator: AppStoreSimulator
        let faults: SimHTTPFaults
        let base: String
        let app: Task<Void, any Error>
        let key: SimAPIKey.Result

        func client(
            bundleId: String = AppStoreServerAPITests.bundleId, roots: [Certificate]? = nil, sleeps: NIOLockedValueBox<[Duration]>? = nil,
            configure: (inout AppStoreServerAPIClient.Configuration) -> Void = { _ in }
        ) throws -> AppStoreServerAPIClient {
            var config = AppStoreServerAPIClient.Configuration()
            config.productionURL = base
            config.sandboxURL = base + "/sandbox"
            configure(&config)
            let anchors = try simulator.trustAnchor()
            let jwsRoot = try Certificate(derEncoded: Array(Data(base64Encoded: anchors.jwsRoot)!))
            return AppStoreServerAPIClient(
                credentials: try AppStoreAPICredentials(keyId: key.keyId, issuerId: key.issuerId, bundleId: bundleId, privateKeyPEM: key.privateKey),
                verifier: SignedPayloadVerifier(roots: roots ?? [jwsRoot]), configuration: config,
                sleep: { duration in sleeps?.withLockedValue { $0.append(duration) } })
        }
    }

    static func serve(_ body: (Served) async throws -> Void) async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sim-api-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        // Its PKI (RSA keys) on a GCD thread: neither the cooperative threads nor NIO's pool, which its API handlers use.
        let simulator = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<AppStoreSimulator, any Error>) in
            DispatchQueue.global().async { continuation.resume(with: Result { try AppStoreSimulator(directory: dir) }) }
        }
        let faults = SimHTTPFaults()
        let endpoint = try VerifyReceiptEndpoint(simulator: simulator, sharedSecret: nil, faults: faults)
        var quiet = Logger(label: "sim-api")
        quiet.logLevel = .critical
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let application = endpoint.application(
            host: "127.0.0.1", port: 0, logger: quiet, api: AppStoreServerAPIEndpoint(simulator: simulator, faults: faults)
        ) { continuation.yield($0) }
        let app = Task { try await application.run() }
        defer { app.cancel() }
        var iterator = ports.makeAsyncIterator()
        let port = try #require(await iterator.next())
        let key = simulator.apiKeyResult()
        try await body(Served(simulator: simulator, faults: faults, base: "http://127.0.0.1:\(port)", app: app, key: key))
    }

    /// A token as a client would make it, with every claim adjustable.
    static func token(
        _ key: SimAPIKey.Result, kid: String? = nil, iss: String? = nil, aud: String = "appstoreconnect-v1", bid: String = bundleId,
        iat: Int64? = nil, exp: Int64? = nil, signer: P256.Signing.PrivateKey? = nil
    ) throws -> String {
        let now = Int64(Date().timeIntervalSince1970)
        let header = try JSONSerialization.data(withJSONObject: ["alg": "ES256", "kid": kid ?? key.keyId, "typ": "JWT"])
        let claims = try JSONSerialization.data(withJSONObject: [
            "iss": iss ?? key.issuerId, "aud": aud, "bid": bid, "iat": iat ?? now, "exp": exp ?? now + 600,
        ])
        let input = JWSSigningPKI.base64URL(Array(header)) + "." + JWSSigningPKI.base64URL(Array(claims))
        let privateKey = try signer ?? P256.Signing.PrivateKey(pemRepresentation: key.privateKey)
        return input + "." + JWSSigningPKI.base64URL(Array(try privateKey.signature(for: SHA256.hash(data: Array(input.utf8))).rawRepresentation))
    }

    static func get(_ url: String, token: String?) async throws -> (status: Int, body: JSONValue?, retryAfter: String?) {
        var request = HTTPClientRequest(url: url)
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 8 << 20)
        return (
            Int(response.status.code), try? JSONDecoder().decode(JSONValue.self, from: Data(bytes.readableBytesView)),
            response.headers.first(name: "Retry-After")
        )
    }

    /// A purchase made on NIO's blocking pool, as the simulator's RPC router runs it: it signs a whole receipt
    /// (RSA) and writes SQLite, which must not hold one of the few cooperative threads every test shares.
    static func buy(
        _ sim: AppStoreSimulator, _ productId: String, _ type: ProductType, appleId: String = "ann@icloud", environment: SimEnvironment? = nil
    ) async throws -> SimPurchase.Result {
        try await NIOThreadPool.singleton.runIfActive {
            try sim.purchase(.init(appleId: appleId, bundleId: bundleId, productId: productId, productType: type, environment: environment))
        }
    }

    @Test func everyBadTokenIs401AndAGoodOneReadsTheTransaction() async throws {
        try await Self.serve { served in
            let bought = try await Self.buy(served.simulator, "coins.100", .consumable)
            let url = served.base + "/inApps/v1/transactions/\(bought.transactionId)"
            let now = Int64(Date().timeIntervalSince1970)
            let bad: [String: String?] = [
                "no token": nil, "another key": try Self.token(served.key, signer: P256.Signing.PrivateKey()),
                "wrong kid": try Self.token(served.key, kid: "WRONGKEY01"), "wrong issuer": try Self.token(served.key, iss: UUID().uuidString),
                "expired": try Self.token(served.key, iat: now - 1_200, exp: now - 10),
                "exp more than 60 min after iat": try Self.token(served.key, iat: now, exp: now + 3_601),
                "wrong aud": try Self.token(served.key, aud: "appstoreconnect-v2"),
                "another app's bid": try Self.token(served.key, bid: "com.attacker.app"), "garbage": "a.b.c",
            ]
            for (name, token) in bad {
                #expect(try await Self.get(url, token: token).status == 401, "\(name)")
            }
            let good = try await Self.get(url, token: try Self.token(served.key))
            #expect(good.status == 200)
            let jws = try #require(good.body?["signedTransactionInfo"]?.stringValue)
            let payload = try JSONValue.parse(String(decoding: SignedPayloadVerifier.unverifiedPayload(jws)!, as: UTF8.self))
            #expect(payload["transactionId"]?.stringValue == bought.transactionId)
            // Apple's codes: a malformed id, an unknown one, one of the other environment.
            let invalid = try await Self.get(served.base + "/inApps/v1/transactions/abc", token: try Self.token(served.key))
            #expect(invalid.status == 400 && invalid.body?["errorCode"] == .int(4_000_006))
            let unknown = try await Self.get(served.base + "/inApps/v1/transactions/99999999", token: try Self.token(served.key))
            #expect(unknown.status == 404 && unknown.body?["errorCode"] == .int(4_040_010) && unknown.body?["errorMessage"] != nil)
            let otherEnvironment = try await Self.get(
                served.base + "/sandbox/inApps/v1/transactions/\(bought.transactionId)", token: try Self.token(served.key))
            #expect(otherEnvironment.status == 404)
        }
    }

    @Test func historyPagesTwentyAtATimeWithFiltersAndSort() async throws {
        try await Self.serve { served in
            var ids: [String] = []
            for i in 0..<45 {
                let (product, type): (String, ProductType) = i % 3 == 0 ? ("pack.\(i)", .nonConsumable) : ("coins.100", .consumable)
                ids.append(try await Self.buy(served.simulator, product, type).transactionId)
            }
            _ = try await Self.buy(served.simulator, "coins.100", .consumable, appleId: "someone-else@icloud")
            let client = try served.client()
            var pages: [[VerifiedAPITransaction]] = []
            for try await page in client.history(ids[7]) { pages.append(page) }
            #expect(pages.map(\.count) == [20, 20, 5])
            #expect(pages.flatMap { $0 }.compactMap(\.transactionId) == ids, "every transaction of this customer, in order, once")

            var consumablesNewestFirst = TransactionHistoryFilter()
            consumablesNewestFirst.productTypes = ["CONSUMABLE"]
            consumablesNewestFirst.sort = .descending
            var filtered: [String] = []
            for try await page in client.history(ids[0], filter: consumablesNewestFirst) { filtered += page.compactMap(\.transactionId) }
            #expect(filtered == ids.enumerated().filter { $0.offset % 3 != 0 }.map(\.element).reversed())

            // Invalid filters: Apple's codes.
            let token = try Self.token(served.key)
            for (query, code) in [
                ("sort=SIDEWAYS", 4_000_021), ("productType=GIFT", 4_000_022), ("revoked=maybe", 4_000_030),
                ("startDate=5&endDate=1", 4_000_013), ("revision=%21%21", 4_000_005),
            ] as [(String, Int)] {
                let answer = try await Self.get(served.base + "/inApps/v2/history/\(ids[0])?\(query)", token: token)
                #expect(answer.status == 400 && answer.body?["errorCode"] == .int(Int64(code)), "\(query)")
            }
            let firstPage = try await Self.get(served.base + "/inApps/v2/history/\(ids[0])", token: token)
            #expect(firstPage.body?["hasMore"] == .bool(true) && firstPage.body?["bundleId"] == .string(Self.bundleId))
            #expect(firstPage.body?["environment"] == .string("Production") && firstPage.body?["revision"]?.stringValue != nil)
        }
    }

    @Test func ordersAreFoundByTheirIdAndUnknownOnesAreInvalid() async throws {
        try await Self.serve { served in
            let bought = try await Self.buy(served.simulator, "pack.castle", .nonConsumable)
            let orderId = try #require(bought.orderId)
            #expect(orderId.hasPrefix("MK") && orderId.count == 10)
            let client = try served.client()
            #expect(try await client.lookUpOrder(orderId).compactMap(\.transactionId) == [bought.transactionId])
            #expect(try await client.lookUpOrder("MKNOSUCH00").isEmpty)
            let raw = try await Self.get(served.base + "/inApps/v1/lookup/MKNOSUCH00", token: try Self.token(served.key))
            #expect(raw.status == 200 && raw.body?["status"] == .int(1))
        }
    }

    @Test func theClientRetriesHonoursRetryAfterFallsBackToSandboxAndReusesItsToken() async throws {
        try await Self.serve { served in
            let production = try await Self.buy(served.simulator, "coins.100", .consumable)
            let sandbox = try await Self.buy(served.simulator, "coins.100", .consumable, environment: .sandbox)
            let sleeps = NIOLockedValueBox<[Duration]>([])
            let client = try served.client(sleeps: sleeps)
            // Two 429s (Retry-After: the UNIX time in milliseconds of the next request allowed, a second on), then the answer.
            try served.faults.set(.init(mode: .http429, count: 2))
            #expect(try await client.transactionInfo(production.transactionId).transactionId == production.transactionId)
            let waited = sleeps.withLockedValue { $0 }
            // Until that time: at most a second, less as the answer took longer to read (read as seconds, it would be past
            // the 60 s cap and the call would have failed).
            #expect(waited.count == 2 && waited.allSatisfy { $0 >= .zero && $0 <= .seconds(1) }, "\(waited)")
            // A 5xx without Retry-After: backoff 1 s.
            try served.faults.set(.init(mode: .http503, count: 1))
            _ = try await client.transactionInfo(production.transactionId)
            #expect(sleeps.withLockedValue { $0 }.count == 3)
            // Too many: the last error surfaces after maxAttempts.
            try served.faults.set(.init(mode: .http429, count: 10))
            await #expect(throws: AppStoreAPIError.api(httpStatus: 429, errorCode: 4_290_000, message: "Rate limit exceeded.")) {
                try await client.transactionInfo(production.transactionId)
            }
            try served.faults.set(.init(mode: .none))
            // Not found in production: sandbox.
            let fromSandbox = try await client.transactionInfo(sandbox.transactionId)
            #expect(fromSandbox.transactionId == sandbox.transactionId && fromSandbox.environment == "Sandbox")
            // One token for all of the above.
            #expect(client.tokensMinted == 1)
        }
    }

    @Test func payloadsThatDoNotVerifyOrNameAnotherAppAreRefused() async throws {
        try await Self.serve { served in
            let bought = try await Self.buy(served.simulator, "coins.100", .consumable)
            // A client trusting another root: the simulator's signatures do not verify.
            let stranger = try JWSSigningPKI.generate()
            await #expect(throws: AppStoreAPIError.self) {
                try await served.client(roots: [stranger.root]).transactionInfo(bought.transactionId)
            }
            do {
                _ = try await served.client(roots: [stranger.root]).transactionInfo(bought.transactionId)
            } catch let error as AppStoreAPIError {
                guard case .verification = error else { Issue.record("expected a verification failure, got \(error)"); return }
            }
        }
    }
}
