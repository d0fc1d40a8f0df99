import AsyncHTTPClient
import Crypto
import CryptoExtras
import Foundation
import JSONRPC
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// A Google service account's key file, as Google issues it (the fields the OAuth grant needs).
public struct PlayServiceAccount: Sendable, CustomStringConvertible {
    /// Never the key: this is what a log or an error message shows.
    public var description: String { "PlayServiceAccount(\(clientEmail), key \(privateKeyId.prefix(8))…)" }

    public let clientEmail: String
    public let privateKeyId: String
    public let tokenURI: String
    let key: _RSA.Signing.PrivateKey

    /// Reads the key file's JSON (`client_email`, `private_key`, `private_key_id`, `token_uri`).
    public init(keyFileJSON: Data) throws {
        guard let object = try? JSONSerialization.jsonObject(with: keyFileJSON) as? [String: Any],
            object["type"] as? String == "service_account", let email = object["client_email"] as? String,
            let pem = object["private_key"] as? String, let id = object["private_key_id"] as? String
        else { throw PlayAPIError.badKeyFile("not a service-account key file (type, client_email, private_key, private_key_id)") }
        do {
            key = try _RSA.Signing.PrivateKey(pemRepresentation: pem)
        } catch {
            throw PlayAPIError.badKeyFile("its private_key is not an RSA key in PEM")
        }
        clientEmail = email
        privateKeyId = id
        tokenURI = object["token_uri"] as? String ?? "https://oauth2.googleapis.com/token"
    }
}

/// Why a call to the Play Developer API failed.
public enum PlayAPIError: Error, Sendable, Equatable {
    /// Google's error answer: its HTTP status, the first error's `reason` (e.g. purchaseTokenNotFound) and message.
    case api(httpStatus: Int, reason: String?, message: String?)
    /// The token endpoint refused the key (`error` and `error_description`), or the API refused the token twice.
    case unauthorized(String)
    case badKeyFile(String)
    case malformedResponse
    case transport(String)

    /// Worth trying again later (Google's 429 and 5xx, or no answer).
    public var isRetryable: Bool {
        switch self {
        case .api(let status, _, _): status == 429 || status >= 500
        case .transport: true
        default: false
        }
    }
}

/// Google's Play Developer API (androidpublisher v3), the purchase methods the suite needs: OAuth 2.0 access tokens
/// from the service account's JWT-bearer grant (RS256, minted once and reused until five minutes before they end,
/// dropped and minted again on a 401), retries on 429 and 5xx (1, 2, 4 s), Google's error bodies read into
/// `PlayAPIError.api`.
public final class PlayDeveloperAPIClient: Sendable {
    public struct Configuration: Sendable {
        /// The API's root: Google's, or a simulator's (`--play-api-url`).
        public var apiURL = "https://androidpublisher.googleapis.com"
        /// Attempts per call on 429 and 5xx (the first included): two, one second apart, so a call fits in the deadline of
        /// the redeem waiting for it (fulfillment's callers retry later themselves).
        public var maxAttempts = 2
        public var requestTimeout: TimeAmount = .seconds(30)
        public init() {}
    }

    static let scope = "https://www.googleapis.com/auth/androidpublisher"
    let account: PlayServiceAccount
    let configuration: Configuration
    private let http: HTTPClient
    private let sleep: @Sendable (Duration) async throws -> Void
    private let nowMs: @Sendable () -> Int64
    private let token = NIOLockedValueBox<(value: String, expiresMs: Int64)?>(nil)
    private let minted = NIOLockedValueBox(0)

    public init(
        account: PlayServiceAccount, configuration: Configuration = .init(), httpClient: HTTPClient = .shared,
        sleep: @escaping @Sendable (Duration) async throws -> Void = { try await Task.sleep(for: $0) },
        nowMs: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) }
    ) {
        self.account = account
        self.configuration = configuration
        self.http = httpClient
        self.sleep = sleep
        self.nowMs = nowMs
    }

    /// Access tokens obtained so far (one serves many calls).
    public var tokensMinted: Int { minted.withLockedValue { $0 } }

    // MARK: purchases

    /// purchases.productsv2.getproductpurchasev2.
    public func productPurchase(packageName: String, token: String) async throws -> JSONValue {
        try await call(.GET, "\(applications(packageName))/purchases/productsv2/tokens/\(Self.escaped(token))") ?? .object([:])
    }

    /// purchases.subscriptionsv2.get.
    public func subscriptionPurchase(packageName: String, token: String) async throws -> JSONValue {
        try await call(.GET, "\(applications(packageName))/purchases/subscriptionsv2/tokens/\(Self.escaped(token))") ?? .object([:])
    }

    /// purchases.products.acknowledge, or purchases.products.consume (which also acknowledges).
    public func acknowledgeProduct(packageName: String, productId: String, token: String, consume: Bool) async throws {
        let action = consume ? "consume" : "acknowledge"
        _ = try await call(
            .POST, "\(applications(packageName))/purchases/products/\(Self.escaped(productId))/tokens/\(Self.escaped(token)):\(action)",
            body: consume ? nil : .object([:]))
    }

    /// purchases.subscriptions.acknowledge.
    public func acknowledgeSubscription(packageName: String, subscriptionId: String, token: String) async throws {
        _ = try await call(
            .POST,
            "\(applications(packageName))/purchases/subscriptions/\(Self.escaped(subscriptionId))/tokens/\(Self.escaped(token)):acknowledge",
            body: .object([:]))
    }

    /// purchases.voidedpurchases.list: one-time purchases and subscriptions (`type=1`) voided since `startTimeMs` (Google keeps
    /// 30 days), quantity-based partial refunds included, 1,000 a page; `pageToken` from the previous page's
    /// `tokenPagination.nextPageToken`.
    public func voidedPurchases(packageName: String, startTimeMs: Int64, pageToken: String?) async throws -> JSONValue {
        var url =
            "\(applications(packageName))/purchases/voidedpurchases?startTime=\(startTimeMs)&type=1&maxResults=1000"
            + "&includeQuantityBasedPartialRefund=true"
        if let pageToken { url += "&token=\(Self.escaped(pageToken))" }
        return try await call(.GET, url) ?? .object([:])
    }

    func applications(_ packageName: String) -> String {
        "\(configuration.apiURL.hasSuffix("/") ? String(configuration.apiURL.dropLast()) : configuration.apiURL)/androidpublisher/v3/applications/\(Self.escaped(packageName))"
    }

    // MARK: the wire

    /// One request with a bearer token, retried on 429 and 5xx (1, 2, 4 s) and once with a new token on 401; the answer's
    /// JSON, or nil for a 2xx without a body.
    func call(_ method: HTTPMethod, _ url: String, body: JSONValue? = nil) async throws -> JSONValue? {
        var attempt = 0
        var refreshed = false
        let encoded = try body.map { try JSONEncoder().encode($0) }
        while true {
            attempt += 1
            var request = HTTPClientRequest(url: url)
            request.method = method
            request.headers.add(name: "Authorization", value: "Bearer " + (try await accessToken()))
            request.headers.add(name: "Accept", value: "application/json")
            if let encoded {
                request.headers.add(name: "Content-Type", value: "application/json")
                request.body = .bytes(ByteBuffer(bytes: encoded))
            }
            let (status, bytes) = try await execute(request)
            if (200..<300).contains(status) {
                guard !bytes.isEmpty else { return nil }
                guard let json = try? JSONDecoder().decode(JSONValue.self, from: bytes) else { throw PlayAPIError.malformedResponse }
                return json
            }
            if status == 401, !refreshed {
                refreshed = true
                token.withLockedValue { $0 = nil }
                continue
            }
            let error = (try? JSONDecoder().decode(JSONValue.self, from: bytes))?["error"]
            let failure = PlayAPIError.api(
                httpStatus: status, reason: error?["errors"]?.arrayValue?.first?["reason"]?.stringValue,
                message: error?["message"]?.stringValue)
            guard failure.isRetryable, attempt < configuration.maxAttempts else { throw failure }
            try await sleep(.seconds(1 << (attempt - 1)))
        }
    }

    private func execute(_ request: HTTPClientRequest) async throws -> (Int, Data) {
        do {
            let response = try await http.execute(request, timeout: configuration.requestTimeout)
            let bytes = try await response.body.collect(upTo: 16 << 20)
            return (Int(response.status.code), Data(bytes.readableBytesView))
        } catch {
            throw PlayAPIError.transport("\(error)")
        }
    }

    /// The cached access token, or a new one from the token endpoint (the JWT-bearer grant, retried on 429 and 5xx).
    func accessToken() async throws -> String {
        let now = nowMs()
        if let cached = token.withLockedValue({ $0 }), cached.expiresMs - 300_000 > now { return cached.value }
        let assertion = try self.assertion(nowSeconds: now / 1000)
        var request = HTTPClientRequest(url: account.tokenURI)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        let form = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=\(assertion)"
        request.body = .bytes(ByteBuffer(string: form))
        var attempt = 0
        while true {
            attempt += 1
            let (status, bytes) = try await execute(request)
            let json = try? JSONSerialization.jsonObject(with: bytes) as? [String: Any]
            if status == 200, let value = json?["access_token"] as? String {
                let seconds = (json?["expires_in"] as? NSNumber)?.int64Value ?? Int64(json?["expires_in"] as? String ?? "") ?? 3600
                token.withLockedValue { $0 = (value, now + seconds * 1000) }
                minted.withLockedValue { $0 += 1 }
                return value
            }
            if (status == 429 || status >= 500), attempt < configuration.maxAttempts {
                try await sleep(.seconds(1 << (attempt - 1)))
                continue
            }
            throw PlayAPIError.unauthorized("\(json?["error"] as? String ?? "HTTP \(status)"): \(json?["error_description"] as? String ?? "")")
        }
    }

    /// The grant's assertion: RS256, `kid` the key's id; `iss` the account, `aud` the token endpoint it is posted to (Google's
    /// `https://oauth2.googleapis.com/token` in the key files Google issues: an assertion is never good for another endpoint
    /// than the one it goes to), the androidpublisher scope, an hour's life.
    func assertion(nowSeconds: Int64) throws -> String {
        func part(_ object: [String: Any]) throws -> String {
            Self.base64url(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]))
        }
        let input =
            "\(try part(["alg": "RS256", "typ": "JWT", "kid": account.privateKeyId])).\(try part(["iss": account.clientEmail, "scope": Self.scope, "aud": account.tokenURI, "iat": nowSeconds, "exp": nowSeconds + 3600]))"
        let signature = try account.key.signature(for: Data(input.utf8), padding: .insecurePKCS1v1_5)
        return "\(input).\(Self.base64url(signature.rawRepresentation))"
    }

    static func base64url(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func escaped(_ segment: String) -> String {
        segment.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? segment
    }
}
