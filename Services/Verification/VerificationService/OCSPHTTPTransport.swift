import AsyncHTTPClient
import NIOCore
import Receipts

/// How the revocation checker reaches OCSP responders: HTTP POST of the DER request (RFC 6960 appendix A.1), the
/// body of a 200 answer (at most 64 KiB) back; anything else is "could not be reached".
public enum OCSPHTTPTransport {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    public static let post: RevocationChecker.Transport = { request, uri, timeout in
        guard uri.hasPrefix("http://") || uri.hasPrefix("https://") else { throw Failure(description: "not an HTTP URL") }
        var call = HTTPClientRequest(url: uri)
        call.method = .POST
        call.headers.add(name: "Content-Type", value: "application/ocsp-request")
        call.headers.add(name: "Accept", value: "application/ocsp-response")
        call.body = .bytes(ByteBuffer(bytes: request))
        let (seconds, attoseconds) = timeout.components
        let limit = TimeAmount.nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
        let response = try await HTTPClient.shared.execute(call, timeout: limit)
        guard response.status == .ok else { throw Failure(description: "HTTP \(response.status.code)") }
        let body = try await response.body.collect(upTo: 64 * 1024)
        return Array(buffer: body)
    }
}
