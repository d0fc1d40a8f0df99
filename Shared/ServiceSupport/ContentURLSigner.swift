import Crypto
import Foundation

/// Signed, short-lived content URLs (docs/services/edge.md): fulfillment signs one for an account entitled to
/// a content file now; the edge checks it and serves the file. Nothing is stored: a refund stops new URLs,
/// and one already issued is good until its expiry. The key (`IAP_CONTENT_URL_KEY`, at least 32 bytes) is
/// shared by the two and never leaves them.
///
/// A URL: `/v1/content/<contentId>?account=<id>&env=<Production|Sandbox>&expires=<ms>&sig=<base64url>`, the
/// signature an HMAC-SHA256 over the four values (each length-prefixed, so no two tuples sign alike).
public struct ContentURLSigner: Sendable {
    public static let pathPrefix = "/v1/content/"
    private let key: SymmetricKey

    public init(key: String) {
        self.key = SymmetricKey(data: Array(key.utf8))
    }

    /// What a valid URL grants: this file, to this account and scope, until `expiresAtMs`.
    public struct Grant: Sendable, Equatable {
        public var contentId: String
        public var accountId: String
        public var scope: String
        public var expiresAtMs: Int64

        public init(contentId: String, accountId: String, scope: String, expiresAtMs: Int64) {
            self.contentId = contentId
            self.accountId = accountId
            self.scope = scope
            self.expiresAtMs = expiresAtMs
        }
    }

    /// Why a URL is refused (each is a 403 at the edge; the reason goes to the log, not to the client).
    public enum Refusal: String, Error, Sendable {
        case malformed, badSignature, expired
    }

    /// The path and query of a URL for `grant`.
    public func path(for grant: Grant) -> String {
        let allowed = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~"))
        func escape(_ s: String) -> String { s.addingPercentEncoding(withAllowedCharacters: allowed) ?? "" }
        return Self.pathPrefix + escape(grant.contentId) + "?account=" + escape(grant.accountId) + "&env=" + escape(grant.scope)
            + "&expires=\(grant.expiresAtMs)&sig=" + signature(grant)
    }

    /// The grant a URL carries, when its signature is this key's and it has not expired at `nowMs`.
    /// `query` holds the decoded query parameters.
    public func check(contentId: String, query: [String: String], nowMs: Int64) -> Result<Grant, Refusal> {
        guard let accountId = query["account"], let scope = query["env"], let expires = query["expires"].flatMap({ Int64($0) }),
            let sig = query["sig"], !accountId.isEmpty, !contentId.isEmpty
        else { return .failure(.malformed) }
        let grant = Grant(contentId: contentId, accountId: accountId, scope: scope, expiresAtMs: expires)
        guard SecretComparison.equal(Array(sig.utf8), Array(signature(grant).utf8)) else { return .failure(.badSignature) }
        guard nowMs < expires else { return .failure(.expired) }
        return .success(grant)
    }

    private func signature(_ grant: Grant) -> String {
        var message: [UInt8] = Array("iap-content-url-v1".utf8)
        for field in [grant.contentId, grant.accountId, grant.scope, String(grant.expiresAtMs)] {
            let bytes = Array(field.utf8)
            withUnsafeBytes(of: UInt32(bytes.count).bigEndian) { message += $0 }
            message += bytes
        }
        let mac = HMAC<SHA256>.authenticationCode(for: message, using: key)
        return Data(mac).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
