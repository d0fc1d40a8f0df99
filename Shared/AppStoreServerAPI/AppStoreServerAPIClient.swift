import AsyncHTTPClient
import Crypto
import Foundation
import JSONRPC
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import Receipts

/// A team's App Store Server API key (App Store Connect > Users and Access > Integrations): the key id, the
/// issuer id, the P-256 private key (PEM), and the app's bundle id that every token names (`bid`).
public struct AppStoreAPICredentials: Sendable {
    public let keyId: String
    public let issuerId: String
    public let bundleId: String
    let privateKey: P256.Signing.PrivateKey

    public init(keyId: String, issuerId: String, bundleId: String, privateKeyPEM: String) throws {
        self.keyId = keyId
        self.issuerId = issuerId
        self.bundleId = bundleId
        self.privateKey = try P256.Signing.PrivateKey(pemRepresentation: privateKeyPEM)
    }
}

/// A transaction Apple signed, verified with the receipts library (chain to a trusted root, signature,
/// the app's bundle id) before anyone sees it.
public struct VerifiedAPITransaction: Sendable, Equatable {
    /// The JWS as Apple sent it.
    public let signedTransaction: String
    /// Its verified payload (Apple's field names).
    public let payload: JSONValue
    public var transactionId: String? { payload["transactionId"]?.stringValue }
    public var environment: String? { payload["environment"]?.stringValue }
}

/// Get Transaction History's filters (Apple's query parameters).
public struct TransactionHistoryFilter: Sendable {
    public enum Sort: String, Sendable { case ascending = "ASCENDING", descending = "DESCENDING" }
    public var sort: Sort?
    public var productIds: [String] = []
    /// AUTO_RENEWABLE, NON_RENEWABLE, CONSUMABLE, NON_CONSUMABLE.
    public var productTypes: [String] = []
    public var startDateMs: Int64?
    public var endDateMs: Int64?
    public var revoked: Bool?

    public init() {}

    var query: [(String, String)] {
        var out: [(String, String)] = []
        if let sort { out.append(("sort", sort.rawValue)) }
        out += productIds.map { ("productId", $0) }
        out += productTypes.map { ("productType", $0) }
        if let startDateMs { out.append(("startDate", String(startDateMs))) }
        if let endDateMs { out.append(("endDate", String(endDateMs))) }
        if let revoked { out.append(("revoked", String(revoked))) }
        return out
    }
}

/// Why a call to the App Store Server API failed.
public enum AppStoreAPIError: Error, Sendable, Equatable {
    /// Apple's error answer (`errorCode` as documented, e.g. 4040010 transaction id not found).
    case api(httpStatus: Int, errorCode: Int?, message: String?)
    /// 401: the key, key id, issuer id or bundle id is not what Apple has.
    case unauthorized
    /// A signed payload in the answer failed verification: nothing from it is used.
    case verification(JWSFailure)
    /// A payload signed for another app.
    case bundleMismatch
    case malformedResponse
    case transport(String)

    /// Apple's "not found here" codes, on which a production call is repeated against sandbox.
    static let notFoundCodes: Set<Int> = [4_040_010, 4_040_005, 4_040_001]
    var isNotFound: Bool {
        if case .api(404, let code?, _) = self { return Self.notFoundCodes.contains(code) }
        return false
    }
}

/// Apple's App Store Server API (docs/contract.md): typed calls, ES256 tokens minted and reused, production
/// first then sandbox on Apple's "not found" codes, retries on 429 and 5xx honouring `Retry-After`, history
/// pages as an `AsyncSequence`, and every signed payload verified before it is returned.
public final class AppStoreServerAPIClient: Sendable {
    public struct Configuration: Sendable {
        public var productionURL = "https://api.storekit.itunes.apple.com"
        public var sandboxURL = "https://api.storekit-sandbox.itunes.apple.com"
        /// Attempts per call on 429 and 5xx (the first included).
        public var maxAttempts = 4
        /// Longest wait honoured from a `Retry-After` (longer ones fail the call as retryable).
        public var maxRetryAfter: Duration = .seconds(60)
        /// Tokens are valid this long (Apple's ceiling: 60 minutes) and replaced 5 minutes before they end.
        public var tokenLifetimeSeconds: Int64 = 20 * 60
        public var requestTimeout: TimeAmount = .seconds(30)
        public init() {}
    }

    let credentials: AppStoreAPICredentials
    let verifier: SignedPayloadVerifier
    let configuration: Configuration
    private let http: HTTPClient
    private let sleep: @Sendable (Duration) async throws -> Void
    /// The wall clock (ms): tokens are minted by it, `Retry-After` times read against it.
    private let nowMs: @Sendable () -> Int64
    private let token = NIOLockedValueBox<(value: String, expires: Int64)?>(nil)
    private let minted = NIOLockedValueBox(0)

    /// `sleep` and `nowMs` are the waits between retries and the clock tokens are minted by (tests pass their own;
    /// nothing else should).
    public init(
        credentials: AppStoreAPICredentials, verifier: SignedPayloadVerifier, configuration: Configuration = .init(),
        httpClient: HTTPClient = .shared,
        sleep: @escaping @Sendable (Duration) async throws -> Void = { try await Task.sleep(for: $0) },
        nowMs: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) }
    ) {
        self.credentials = credentials
        self.verifier = verifier
        self.configuration = configuration
        self.http = httpClient
        self.sleep = sleep
        self.nowMs = nowMs
    }

    /// How many tokens this client has signed (one serves many calls until near its expiry).
    public var tokensMinted: Int { minted.withLockedValue { $0 } }

    // MARK: endpoints

    /// Get Transaction Info: one transaction by id, production first, then sandbox.
    public func transactionInfo(_ transactionId: String) async throws -> VerifiedAPITransaction {
        let (body, _) = try await bothEnvironments { base in
            try await self.get(base + "/inApps/v1/transactions/" + Self.escaped(transactionId))
        }
        guard let jws = body["signedTransactionInfo"]?.stringValue else { throw AppStoreAPIError.malformedResponse }
        return try await verified(jws)
    }

    /// Get App Transaction Info (API 1.17): the app transaction of the customer any of whose transaction ids (or its
    /// appTransactionId) is given, production first, then sandbox; verified (chain, this app's bundle id). Its payload's
    /// environment is `receiptType`. Apple's 4040019 (the customer has no app transaction) is `.api(404, 4040019, _)`.
    public func appTransactionInfo(_ anyTransactionId: String) async throws -> VerifiedAPITransaction {
        let (body, _) = try await bothEnvironments { base in
            try await self.get(base + "/inApps/v1/transactions/appTransactions/" + Self.escaped(anyTransactionId))
        }
        guard let jws = body["signedAppTransactionInfo"]?.stringValue else { throw AppStoreAPIError.malformedResponse }
        return try await verified(jws)
    }

    /// Look Up Order ID: the transactions of the order on a customer's emailed receipt (empty when Apple
    /// answers the order id is invalid).
    public func lookUpOrder(_ orderId: String) async throws -> [VerifiedAPITransaction] {
        let path = "/inApps/v1/lookup/" + Self.escaped(orderId)
        var body = try await get(configuration.productionURL + path)
        // status 1: no such order in production; sandbox may have it.
        if body["status"]?.intValue == 1 { body = try await get(configuration.sandboxURL + path) }
        guard body["status"]?.intValue == 0 else { return [] }
        var out: [VerifiedAPITransaction] = []
        for jws in body["signedTransactions"]?.arrayValue ?? [] {
            guard let jws = jws.stringValue else { throw AppStoreAPIError.malformedResponse }
            out.append(try await verified(jws))
        }
        return out
    }

    /// Get Transaction History v2: the customer's whole history, a page (up to 20) at a time, following
    /// `revision` while `hasMore`.
    public func history(_ transactionId: String, filter: TransactionHistoryFilter = .init()) -> TransactionHistoryPages {
        TransactionHistoryPages(client: self, transactionId: transactionId, filter: filter)
    }

    /// One history page: its verified transactions, the next revision and whether more follow; `base` is
    /// the environment found by the first page.
    func historyPage(_ transactionId: String, filter: TransactionHistoryFilter, revision: String?, base: String?) async throws
        -> (transactions: [VerifiedAPITransaction], revision: String?, hasMore: Bool, base: String)
    {
        var query = filter.query
        if let revision { query.append(("revision", revision)) }
        let path = "/inApps/v2/history/" + Self.escaped(transactionId) + Self.queryString(query)
        let (body, usedBase): (JSONValue, String)
        if let base {
            (body, usedBase) = (try await get(base + path), base)
        } else {
            (body, usedBase) = try await bothEnvironments { try await self.get($0 + path) }
        }
        var transactions: [VerifiedAPITransaction] = []
        for jws in body["signedTransactions"]?.arrayValue ?? [] {
            guard let jws = jws.stringValue else { throw AppStoreAPIError.malformedResponse }
            transactions.append(try await verified(jws))
        }
        return (transactions, body["revision"]?.stringValue, body["hasMore"]?.boolValue ?? false, usedBase)
    }

    // MARK: plumbing

    /// `call` against production, and against sandbox when production answers one of Apple's not-found codes.
    func bothEnvironments(_ call: (String) async throws -> JSONValue) async throws -> (JSONValue, String) {
        do {
            return (try await call(configuration.productionURL), configuration.productionURL)
        } catch let error as AppStoreAPIError where error.isNotFound {
            return (try await call(configuration.sandboxURL), configuration.sandboxURL)
        }
    }

    /// One GET with a bearer token, retried on 429 and 5xx.
    func get(_ url: String) async throws -> JSONValue {
        guard let json = try await send(.GET, url) else { throw AppStoreAPIError.malformedResponse }
        return json
    }

    /// One request with a bearer token (and a JSON body), retried on 429 and 5xx (waiting `Retry-After`,
    /// else 1, 2, 4 s); the answer's JSON, or nil for a 2xx without a body.
    func send(
        _ method: HTTPMethod, _ url: String, body: JSONValue? = nil, raw: (bytes: [UInt8], contentType: String)? = nil, maxAttempts: Int? = nil
    ) async throws -> JSONValue? {
        let maxAttempts = maxAttempts ?? configuration.maxAttempts
        var attempt = 0
        let encoded = try body.map { try JSONEncoder().encode($0) }
        while true {
            attempt += 1
            var request = HTTPClientRequest(url: url)
            request.method = method
            request.headers.add(name: "Authorization", value: "Bearer " + (try bearer()))
            request.headers.add(name: "Accept", value: "application/json")
            if let encoded {
                request.headers.add(name: "Content-Type", value: "application/json")
                request.body = .bytes(ByteBuffer(bytes: encoded))
            } else if let raw {
                request.headers.add(name: "Content-Type", value: raw.contentType)
                request.body = .bytes(ByteBuffer(bytes: raw.bytes))
            }
            let response: HTTPClientResponse
            let bytes: ByteBuffer
            do {
                response = try await http.execute(request, timeout: configuration.requestTimeout)
                bytes = try await response.body.collect(upTo: 16 << 20)
            } catch {
                throw AppStoreAPIError.transport("\(error)")
            }
            let status = Int(response.status.code)
            if (200..<300).contains(status) {
                guard bytes.readableBytes > 0 else { return nil }
                guard let json = try? JSONDecoder().decode(JSONValue.self, from: Data(bytes.readableBytesView)) else {
                    throw AppStoreAPIError.malformedResponse
                }
                return json
            }
            if status == 401 { throw AppStoreAPIError.unauthorized }
            let error = try? JSONDecoder().decode(JSONValue.self, from: Data(bytes.readableBytesView))
            let failure = AppStoreAPIError.api(
                httpStatus: status, errorCode: error?["errorCode"]?.intValue.map(Int.init), message: error?["errorMessage"]?.stringValue)
            guard status == 429 || status >= 500, attempt < maxAttempts else { throw failure }
            let wait =
                response.headers.first(name: "Retry-After").flatMap { Self.wait(retryAfter: $0, nowMs: nowMs()) } ?? .seconds(1 << (attempt - 1))
            guard wait <= configuration.maxRetryAfter else { throw failure }
            try await sleep(wait)
        }
    }

    /// How long a `Retry-After` says to wait. Apple's is the UNIX time, in milliseconds, of the next request allowed
    /// ("Identifying rate limits"); a small number is read as HTTP's delay in seconds, as other servers send it.
    package static func wait(retryAfter: String, nowMs: Int64) -> Duration? {
        guard let value = Int64(retryAfter.trimmingCharacters(in: .whitespaces)), value >= 0 else { return nil }
        if value >= 100_000_000_000 { return .milliseconds(max(0, value - nowMs)) }  // a time: past 1973-03-03 in milliseconds
        return .seconds(value)
    }

    /// The current token, or a new one when none is left with more than 5 minutes to run.
    private func bearer() throws -> String {
        let now = nowMs() / 1000
        if let current = token.withLockedValue({ $0 }), current.expires - now > 300 { return current.value }
        let expires = now + configuration.tokenLifetimeSeconds
        let header = try JSONSerialization.data(withJSONObject: ["alg": "ES256", "kid": credentials.keyId, "typ": "JWT"], options: [.sortedKeys])
        let claims = try JSONSerialization.data(
            withJSONObject: [
                "iss": credentials.issuerId, "iat": now, "exp": expires, "aud": "appstoreconnect-v1", "bid": credentials.bundleId,
            ], options: [.sortedKeys])
        let input = JWSSigningPKI.base64URL(Array(header)) + "." + JWSSigningPKI.base64URL(Array(claims))
        let signature = try credentials.privateKey.signature(for: SHA256.hash(data: Array(input.utf8)))
        let value = input + "." + JWSSigningPKI.base64URL(Array(signature.rawRepresentation))
        token.withLockedValue { $0 = (value, expires) }
        minted.withLockedValue { $0 += 1 }
        return value
    }

    func verified(_ jws: String) async throws -> VerifiedAPITransaction {
        let verified = try await verifiedData(jws)
        guard verified.payload["bundleId"]?.stringValue == credentials.bundleId else { throw AppStoreAPIError.bundleMismatch }
        return VerifiedAPITransaction(signedTransaction: jws, payload: verified.payload)
    }

    /// Percent-encodes all but RFC 3986's unreserved characters.
    static func escaped(_ segment: String) -> String {
        segment.addingPercentEncoding(withAllowedCharacters: unreserved) ?? ""
    }

    private static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

    static func queryString(_ items: [(String, String)]) -> String {
        guard !items.isEmpty else { return "" }
        return "?" + items.map { escaped($0.0) + "=" + escaped($0.1) }.joined(separator: "&")
    }
}

/// The pages of a customer's transaction history, fetched one at a time as they are iterated.
public struct TransactionHistoryPages: AsyncSequence, Sendable {
    public typealias Element = [VerifiedAPITransaction]
    let client: AppStoreServerAPIClient
    let transactionId: String
    let filter: TransactionHistoryFilter

    public struct AsyncIterator: AsyncIteratorProtocol {
        let pages: TransactionHistoryPages
        var revision: String?
        var base: String?
        var done = false

        public mutating func next() async throws -> [VerifiedAPITransaction]? {
            guard !done else { return nil }
            let page = try await pages.client.historyPage(pages.transactionId, filter: pages.filter, revision: revision, base: base)
            revision = page.revision
            base = page.base
            done = !page.hasMore
            return page.transactions
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(pages: self) }
}
