import Crypto
import Foundation
import IAPProtocol

/// The Google side of who may call: the service account the simulator issues (its key file, the OAuth 2.0
/// JWT-bearer grant at `/token`, the access tokens the Developer API accepts) and the push service account whose
/// OIDC tokens sign each Pub/Sub push, with its keys at the certs URLs.
public final class PlayAccounts: Sendable {
    static let scope = "https://www.googleapis.com/auth/androidpublisher"
    /// The audience Google documents for the assertion (and that Google's libraries always send), besides the key
    /// file's own `token_uri`.
    static let googleTokenAudience = "https://oauth2.googleapis.com/token"
    static let projectId = "iap-play-sim"
    let serviceAccount: PlayRSAKey
    let pushKey: PlayRSAKey
    let publicURL: String
    public let clientEmail = "play-developer-api@\(PlayAccounts.projectId).iam.gserviceaccount.com"
    public let pushEmail = "rtdn-push@\(PlayAccounts.projectId).iam.gserviceaccount.com"
    /// Access tokens are self-contained: an expiry and an HMAC of it under this key (so they outlive a restart).
    private let tokenKey: SymmetricKey
    /// Access tokens' lifetime, as Google's (an hour).
    static let accessTokenSeconds: Int64 = 3600

    init(directory: URL, publicURL: String) throws {
        serviceAccount = try PlayRSAKey.loadOrCreate(directory: directory, name: "service-account")
        pushKey = try PlayRSAKey.loadOrCreate(directory: directory, name: "push-signing")
        self.publicURL = publicURL.hasSuffix("/") ? String(publicURL.dropLast()) : publicURL
        tokenKey = SymmetricKey(data: SHA256.hash(data: Data(serviceAccount.key.derRepresentation + Data("access-tokens".utf8))))
    }

    var tokenURI: String { "\(publicURL)/token" }
    public var certsURL: String { "\(publicURL)/oauth2/v1/certs" }
    public var jwksURL: String { "\(publicURL)/oauth2/v3/certs" }
    var clientId: String { serviceAccount.numericId }

    public func keyFileResult() -> PlayServiceAccountKey.Result {
        let file: [String: String] = [
            "type": "service_account", "project_id": Self.projectId, "private_key_id": serviceAccount.id,
            "private_key": serviceAccount.key.pkcs8PEMRepresentation + "\n", "client_email": clientEmail, "client_id": clientId,
            "auth_uri": "\(publicURL)/o/oauth2/auth", "token_uri": tokenURI, "auth_provider_x509_cert_url": certsURL,
            "client_x509_cert_url": "\(publicURL)/robot/v1/metadata/x509/\(clientEmail.replacingOccurrences(of: "@", with: "%40"))",
            "universe_domain": "googleapis.com",
        ]
        let json = (try? JSONSerialization.data(withJSONObject: file, options: [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes])) ?? Data()
        return .init(keyFile: String(decoding: json, as: UTF8.self), clientEmail: clientEmail)
    }

    /// An OAuth 2.0 error answer (RFC 6749 section 5.2), with Google's codes and wording.
    struct OAuthError: Error, Equatable {
        var status: Int
        var error: String
        var description: String
        static let badSignature = OAuthError(status: 400, error: "invalid_grant", description: "Invalid JWT Signature.")
        static let badTime = OAuthError(
            status: 400, error: "invalid_grant",
            description:
                "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim."
        )
    }

    /// The JWT-bearer grant: the form body of `POST /token` -> the token answer's JSON object.
    func exchange(form: [String: String], nowSeconds: Int64) -> Result<[String: Any], OAuthError> {
        guard form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer" else {
            return .failure(.init(status: 400, error: "unsupported_grant_type", description: "Invalid grant_type: \(form["grant_type"] ?? "")"))
        }
        guard let assertion = form["assertion"], let jwt = CompactJWT(assertion), serviceAccount.verifies(jwt) else {
            return .failure(.badSignature)
        }
        if let kid = jwt.header["kid"] as? String, kid != serviceAccount.id { return .failure(.badSignature) }
        guard jwt.claims["iss"] as? String == clientEmail else {
            return .failure(.init(status: 401, error: "invalid_client", description: "The OAuth client was not found."))
        }
        guard let audience = jwt.claims["aud"] as? String, [tokenURI, Self.googleTokenAudience].contains(audience) else {
            return .failure(.init(status: 400, error: "invalid_grant", description: "Invalid JWT: Failed audience check."))
        }
        // Google's bounds: at most 60 minutes long (65 tolerated), issued and expiring around now.
        guard let iat = jwt.seconds("iat"), let exp = jwt.seconds("exp"), exp > iat, exp - iat <= 3900, exp > nowSeconds,
            iat <= nowSeconds + 300
        else { return .failure(.badTime) }
        guard let scope = jwt.claims["scope"] as? String, scope.split(separator: " ").contains(Substring(Self.scope)) else {
            return .failure(.init(status: 400, error: "invalid_scope", description: "Invalid OAuth scope or ID token audience provided."))
        }
        let expires = nowSeconds + Self.accessTokenSeconds
        return .success([
            "access_token": accessToken(expiresAt: expires), "expires_in": Self.accessTokenSeconds - 1, "token_type": "Bearer", "scope": Self.scope,
        ])
    }

    func accessToken(expiresAt: Int64) -> String {
        var nonce = [UInt8](repeating: 0, count: 12)
        for i in nonce.indices { nonce[i] = UInt8.random(in: 0...255) }
        let body = "\(expiresAt).\(CompactJWT.base64url(nonce))"
        let mac = HMAC<SHA256>.authenticationCode(for: Data(body.utf8), using: tokenKey)
        return "ya29.\(body).\(CompactJWT.base64url(Data(mac)))"
    }

    /// Whether an `Authorization` header carries an access token this simulator issued that has not expired.
    func authorizes(_ header: String?, nowSeconds: Int64) -> Bool {
        guard let header, header.hasPrefix("Bearer ") else { return false }
        let parts = header.dropFirst("Bearer ".count).split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "ya29", let expires = Int64(parts[1]), expires > nowSeconds,
            let mac = CompactJWT.data(base64url: parts[3])
        else { return false }
        return HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: Data("\(parts[1]).\(parts[2])".utf8), using: tokenKey)
    }

    /// The OIDC token a Pub/Sub push carries: signed RS256 by the push key, `iss` Google's, `aud` as configured, the
    /// push service account's `email` (verified), valid for an hour.
    public func pushToken(audience: String, email: String? = nil, nowSeconds: Int64) throws -> String {
        let sub = pushKey.numericId
        return try pushKey.sign([
            "iss": "https://accounts.google.com", "aud": audience, "azp": sub, "sub": sub, "email": email ?? pushEmail, "email_verified": true,
            "iat": nowSeconds, "exp": nowSeconds + 3600,
        ])
    }

    /// `oauth2/v1/certs`: key id -> PEM certificate.
    func certificates() throws -> [String: String] { [pushKey.id: try pushKey.certificatePEM(commonName: pushEmail)] }

    /// `oauth2/v3/certs`: a JSON Web Key Set.
    func jwks() throws -> [String: Any] { ["keys": [try pushKey.jwk()]] }
}
