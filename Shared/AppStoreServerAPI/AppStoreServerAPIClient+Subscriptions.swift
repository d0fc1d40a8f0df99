import Foundation
import IAPProtocol
import JSONRPC
import Receipts

/// A signed payload Apple sent (renewal info, a notification), verified before anyone sees it.
public struct VerifiedSignedData: Sendable, Equatable {
    /// The JWS as Apple sent it.
    public let signed: String
    /// Its verified payload (Apple's field names).
    public let payload: JSONValue
}

/// One subscription in Get All Subscription Statuses: Apple's status (1 active, 2 expired, 3 billing
/// retry, 4 grace period, 5 revoked), its latest transaction and its renewal info, both verified.
public struct SubscriptionStatusEntry: Sendable, Equatable {
    public let subscriptionGroupIdentifier: String
    public let status: Int
    public let originalTransactionId: String
    public let transaction: VerifiedAPITransaction
    public let renewalInfo: VerifiedSignedData
}

/// Extend a Subscription Renewal Date's answer.
public struct ExtendRenewalDateResponse: Sendable, Equatable {
    public let originalTransactionId: String
    public let webOrderLineItemId: String
    public let success: Bool
    /// The new renewal (expiry) date, ms.
    public let effectiveDateMs: Int64?
}

extension AppStoreServerAPIClient {
    /// Get All Subscription Statuses for the customer who made `transactionId`, optionally only those with
    /// the given statuses; production first, then sandbox.
    public func subscriptionStatuses(_ transactionId: String, statuses: [Int] = []) async throws -> [SubscriptionStatusEntry] {
        let query = Self.queryString(statuses.map { ("status", String($0)) })
        let (body, _) = try await bothEnvironments { base in
            try await self.get(base + "/inApps/v1/subscriptions/" + Self.escaped(transactionId) + query)
        }
        guard body["bundleId"]?.stringValue == credentials.bundleId else { throw AppStoreAPIError.bundleMismatch }
        var out: [SubscriptionStatusEntry] = []
        for group in body["data"]?.arrayValue ?? [] {
            for last in group["lastTransactions"]?.arrayValue ?? [] {
                guard let status = last["status"]?.intValue, let original = last["originalTransactionId"]?.stringValue,
                    let transaction = last["signedTransactionInfo"]?.stringValue, let renewal = last["signedRenewalInfo"]?.stringValue
                else { throw AppStoreAPIError.malformedResponse }
                let verifiedTransaction = try await verified(transaction)
                let renewalInfo = try await verifiedData(renewal)
                // The renewal info and the transaction must be about the subscription Apple says they are.
                guard verifiedTransaction.payload["originalTransactionId"]?.stringValue == original,
                    renewalInfo.payload["originalTransactionId"]?.stringValue == original
                else { throw AppStoreAPIError.malformedResponse }
                out.append(
                    SubscriptionStatusEntry(
                        subscriptionGroupIdentifier: group["subscriptionGroupIdentifier"]?.stringValue ?? "", status: Int(status),
                        originalTransactionId: original, transaction: verifiedTransaction, renewalInfo: renewalInfo))
            }
        }
        return out
    }

    /// Get Refund History v2: every refunded transaction of the customer (all pages, at most `limit`).
    public func refundHistory(_ transactionId: String, limit: Int = 5_000) async throws -> [VerifiedAPITransaction] {
        var out: [VerifiedAPITransaction] = []
        var revision: String?
        var base: String?
        repeat {
            let path = "/inApps/v2/refund/lookup/" + Self.escaped(transactionId) + Self.queryString(revision.map { [("revision", $0)] } ?? [])
            let body: JSONValue
            if let base {
                body = try await get(base + path)
            } else {
                let found = try await bothEnvironments { try await self.get($0 + path) }
                (body, base) = (found.0, found.1)
            }
            for jws in body["signedTransactions"]?.arrayValue ?? [] {
                guard let jws = jws.stringValue else { throw AppStoreAPIError.malformedResponse }
                out.append(try await verified(jws))
            }
            guard body["hasMore"]?.boolValue == true, let next = body["revision"]?.stringValue, out.count < limit else { break }
            revision = next
        } while true
        return out
    }

    /// Send Consumption Information (v2, API 1.19) about a transaction whose refund the customer asked for (202). Apple's
    /// v1 (`/inApps/v1/transactions/consumption/`, numeric codes) is not sent by this client.
    public func sendConsumption(_ transactionId: String, _ request: AppleConsumptionRequest) async throws {
        let body = try JSONDecoder().decode(JSONValue.self, from: JSONEncoder().encode(request))
        _ = try await bothEnvironments { base in
            try await self.send(.PUT, base + "/inApps/v2/transactions/consumption/" + Self.escaped(transactionId), body: body) ?? .null
        }
    }

    /// Finish Transaction (App Store Server API 1.20): the content of `transactionId` is delivered, so the device need not
    /// deliver it again (a finished consumable leaves the receipt). 200 with no body; finishing twice is harmless.
    /// One attempt per environment, never retried here: its caller (fulfillment's outbox) retries on its own schedule,
    /// and a retry here could outlive the caller's deadline and reach Apple after the caller tried again.
    public func finishTransaction(_ transactionId: String) async throws {
        _ = try await bothEnvironments { base in
            try await self.send(.POST, base + "/inApps/v1/transactions/" + Self.escaped(transactionId) + "/finish", maxAttempts: 1) ?? .null
        }
    }

    /// Set App Account Token: ties an original transaction (bought without one, or to move) to an account's UUID.
    public func setAppAccountToken(originalTransactionId: String, appAccountToken: String) async throws {
        _ = try await bothEnvironments { base in
            try await self.send(
                .PUT, base + "/inApps/v1/transactions/" + Self.escaped(originalTransactionId) + "/appAccountToken",
                body: .object(["appAccountToken": .string(appAccountToken)])) ?? .null
        }
    }

    /// Extend a Subscription Renewal Date by `days` (1-90) with Apple's reason code (0 undeclared, 1 customer
    /// satisfaction, 2 other, 3 service issue or outage); `requestIdentifier` makes a retry safe.
    public func extendRenewalDate(originalTransactionId: String, days: Int, reasonCode: Int, requestIdentifier: String) async throws
        -> ExtendRenewalDateResponse
    {
        let body: JSONValue = .object([
            "extendByDays": .int(Int64(days)), "extendReasonCode": .int(Int64(reasonCode)), "requestIdentifier": .string(requestIdentifier),
        ])
        let (answer, _) = try await bothEnvironments { base in
            try await self.send(.PUT, base + "/inApps/v1/subscriptions/extend/" + Self.escaped(originalTransactionId), body: body) ?? .null
        }
        guard let original = answer["originalTransactionId"]?.stringValue else { throw AppStoreAPIError.malformedResponse }
        return ExtendRenewalDateResponse(
            originalTransactionId: original, webOrderLineItemId: answer["webOrderLineItemId"]?.stringValue ?? "",
            success: answer["success"]?.boolValue ?? false, effectiveDateMs: answer["effectiveDate"]?.millisecondsValue)
    }

    /// A signed payload verified (chain, signature) and decoded; not a transaction (no bundle id in it).
    func verifiedData(_ jws: String) async throws -> VerifiedSignedData {
        switch await verifier.verify(jws) {
        case .failure(let failure): throw AppStoreAPIError.verification(failure)
        case .success(let bytes):
            guard let payload = try? JSONDecoder().decode(JSONValue.self, from: Data(bytes)), payload.objectValue != nil else {
                throw AppStoreAPIError.malformedResponse
            }
            return VerifiedSignedData(signed: jws, payload: payload)
        }
    }
}
