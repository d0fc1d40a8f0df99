import AsyncHTTPClient
import CryptoExtras
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// Why a Pub/Sub push's OIDC token was refused.
public enum PlayPushTokenError: Error, Sendable, Equatable {
    /// No `Bearer` token, or not three base64url JSON parts.
    case malformed
    /// Not RS256, or signed by a key the certs URL does not publish, or the signature does not verify.
    case badSignature
    /// `iss` is not Google's (`https://accounts.google.com` or `accounts.google.com`).
    case wrongIssuer
    case wrongAudience
    /// `email` is not the push service account configured, or not verified.
    case wrongEmail
    /// `exp` passed, `iat` in the future, or issued longer ago than a push token lives.
    case expired
    /// Google's keys could not be fetched (retryable: the push is answered with an error and Pub/Sub sends it again).
    case certsUnavailable(String)
}

/// The claims a push token must carry, checked once its signature verified: pure, so the rules have fast tests.
public struct PlayPushTokenRules: Sendable {
    public static let issuers: Set<String> = ["https://accounts.google.com", "accounts.google.com"]
    /// The audience the push subscription was given (Pub/Sub's default: the endpoint URL).
    public var audience: String
    /// The service account the push subscription authenticates as.
    public var email: String
    /// Push tokens live an hour; older ones are refused whatever their `exp` says.
    public var maxAgeSeconds: Int64 = 3_600
    /// Clock difference tolerated between Google and this machine.
    public var skewSeconds: Int64 = 60

    public init(audience: String, email: String) {
        self.audience = audience
        self.email = email
    }

    public func check(_ claims: [String: Any], nowSeconds: Int64) -> PlayPushTokenError? {
        guard let iss = claims["iss"] as? String, Self.issuers.contains(iss) else { return .wrongIssuer }
        guard claims["aud"] as? String == audience else { return .wrongAudience }
        guard claims["email"] as? String == email, claims["email_verified"] as? Bool == true else { return .wrongEmail }
        guard let iat = (claims["iat"] as? NSNumber)?.int64Value, let exp = (claims["exp"] as? NSNumber)?.int64Value else { return .expired }
        guard iat <= nowSeconds + skewSeconds, nowSeconds <= exp + skewSeconds, nowSeconds - iat <= maxAgeSeconds + skewSeconds else {
            return .expired
        }
        return nil
    }
}

/// When Google's signing keys are fetched again: when the answer's `Cache-Control: max-age` runs out (Google rotates them
/// and says for how long each answer holds), or sooner when a token names a key id not yet seen (a key published since),
/// but then at most once per `unknownKeyRefetchSeconds`, so tokens naming made-up key ids cannot make every push a fetch.
public struct PlayCertsCachePolicy: Sendable, Equatable {
    public var unknownKeyRefetchSeconds: Int64 = 30
    public var defaultMaxAgeSeconds: Int64 = 3_600
    public var maxAgeBounds: ClosedRange<Int64> = 60...86_400
    /// How long past its cache life a key still serves while the certs URL cannot be reached.
    public var staleGraceSeconds: Int64 = 86_400
    public init() {}

    public func shouldFetch(knownKey: Bool, fetchedAtMs: Int64?, expiresAtMs: Int64?, nowMs: Int64) -> Bool {
        guard let fetchedAtMs, let expiresAtMs else { return true }
        if nowMs >= expiresAtMs { return true }
        return !knownKey && nowMs - fetchedAtMs >= unknownKeyRefetchSeconds * 1000
    }

    /// How long an answer holds, from its `Cache-Control` header.
    public func maxAgeSeconds(cacheControl: String?) -> Int64 {
        guard let cacheControl else { return defaultMaxAgeSeconds }
        for part in cacheControl.split(separator: ",") {
            let item = part.trimmingCharacters(in: .whitespaces)
            if item.hasPrefix("max-age="), let seconds = Int64(item.dropFirst("max-age=".count)) {
                return min(max(seconds, maxAgeBounds.lowerBound), maxAgeBounds.upperBound)
            }
        }
        return defaultMaxAgeSeconds
    }
}

/// Verifies the OIDC tokens Pub/Sub signs its pushes with, as Google documents: RS256 by one of the keys at the certs URL
/// (Google's JWKS, `googleCertsURL`, cached per `PlayCertsCachePolicy`), then the claims per `PlayPushTokenRules`.
public final class PlayPushTokenVerifier: Sendable {
    /// Where Google publishes the keys that sign its push tokens.
    public static let googleCertsURL = "https://www.googleapis.com/oauth2/v3/certs"
    public let certsURL: String
    public let rules: PlayPushTokenRules
    let policy: PlayCertsCachePolicy
    private let http: HTTPClient
    private let nowMs: @Sendable () -> Int64
    private let cache = NIOLockedValueBox<Keys?>(nil)
    private let fetches = NIOLockedValueBox(0)

    struct Keys {
        var keys: [String: _RSA.Signing.PublicKey]
        var fetchedAtMs: Int64
        var expiresAtMs: Int64
    }

    public init(
        certsURL: String, rules: PlayPushTokenRules, policy: PlayCertsCachePolicy = .init(), httpClient: HTTPClient = .shared,
        nowMs: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) }
    ) {
        self.certsURL = certsURL
        self.rules = rules
        self.policy = policy
        self.http = httpClient
        self.nowMs = nowMs
    }

    /// Times the certs URL was fetched (one answer serves many pushes).
    public var certsFetched: Int { fetches.withLockedValue { $0 } }

    /// The token of an `Authorization: Bearer ...` header, verified; its claims.
    public func verify(authorization: String) async throws(PlayPushTokenError) -> [String: Any] {
        guard authorization.hasPrefix("Bearer ") else { throw .malformed }
        let parts = authorization.dropFirst("Bearer ".count).split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerData = Self.data(base64url: parts[0]), let claimsData = Self.data(base64url: parts[1]),
            let signature = Self.data(base64url: parts[2]),
            let header = try? JSONSerialization.jsonObject(with: headerData) as? [String: Any],
            let claims = try? JSONSerialization.jsonObject(with: claimsData) as? [String: Any]
        else { throw .malformed }
        guard header["alg"] as? String == "RS256", let kid = header["kid"] as? String else { throw .badSignature }
        guard let key = try await key(kid) else { throw .badSignature }
        let input = Data("\(parts[0]).\(parts[1])".utf8)
        guard key.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: signature), for: input, padding: .insecurePKCS1v1_5)
        else { throw .badSignature }
        if let refused = rules.check(claims, nowSeconds: nowMs() / 1000) { throw refused }
        return claims
    }

    /// The public key of `kid`: cached, else fetched again if the policy allows.
    func key(_ kid: String) async throws(PlayPushTokenError) -> _RSA.Signing.PublicKey? {
        let now = nowMs()
        let cached = cache.withLockedValue { $0 }
        let known = cached?.keys[kid]
        guard policy.shouldFetch(knownKey: known != nil, fetchedAtMs: cached?.fetchedAtMs, expiresAtMs: cached?.expiresAtMs, nowMs: now)
        else { return known }
        do {
            let fresh = try await fetch(nowMs: now)
            cache.withLockedValue { $0 = fresh }
            return fresh.keys[kid]
        } catch {
            // Google unreachable: a key it published serves for a day past its cache life (Google rotates keys over weeks);
            // without one, the push is refused retryably (Pub/Sub sends it again).
            if let known, let cached, now < cached.expiresAtMs + policy.staleGraceSeconds * 1000 { return known }
            throw error
        }
    }

    private func fetch(nowMs now: Int64) async throws(PlayPushTokenError) -> Keys {
        fetches.withLockedValue { $0 += 1 }
        let status: UInt
        let body: ByteBuffer
        let cacheControl: String?
        do {
            var request = HTTPClientRequest(url: certsURL)
            request.headers.add(name: "Accept", value: "application/json")
            let response = try await http.execute(request, timeout: .seconds(10))
            status = response.status.code
            cacheControl = response.headers.first(name: "Cache-Control")
            body = try await response.body.collect(upTo: 1 << 20)
        } catch {
            throw .certsUnavailable("\(error)")
        }
        guard status == 200, let json = try? JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Any],
            let list = json["keys"] as? [[String: Any]]
        else { throw .certsUnavailable("\(certsURL) answered HTTP \(status) without a JSON Web Key Set") }
        var keys: [String: _RSA.Signing.PublicKey] = [:]
        for jwk in list where jwk["kty"] as? String == "RSA" && [nil, "sig"].contains(jwk["use"] as? String) {
            guard let kid = jwk["kid"] as? String, let n = (jwk["n"] as? String).flatMap({ Self.data(base64url: $0[...]) }),
                let e = (jwk["e"] as? String).flatMap({ Self.data(base64url: $0[...]) }),
                let key = try? _RSA.Signing.PublicKey(n: n, e: e)
            else { continue }
            keys[kid] = key
        }
        return Keys(keys: keys, fetchedAtMs: now, expiresAtMs: now + policy.maxAgeSeconds(cacheControl: cacheControl) * 1000)
    }

    /// base64url (unpadded) to bytes; mapped byte by byte (Foundation's string replacing goes through NSString).
    static func data(base64url: Substring) -> Data? {
        var bytes = [UInt8]()
        bytes.reserveCapacity(base64url.utf8.count + 3)
        for byte in base64url.utf8 {
            bytes.append(byte == UInt8(ascii: "-") ? UInt8(ascii: "+") : byte == UInt8(ascii: "_") ? UInt8(ascii: "/") : byte)
        }
        bytes += repeatElement(UInt8(ascii: "="), count: (4 - bytes.count % 4) % 4)
        return Data(base64Encoded: Data(bytes))
    }
}
