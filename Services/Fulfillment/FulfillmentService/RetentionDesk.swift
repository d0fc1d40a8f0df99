import Foundation
import IAPProtocol
import JSONRPC
import Receipts
import ServiceSupport

/// Apple's Get Retention Message requests, as the edge hands them over: verified (verification), decided by the catalog's
/// rules from this server's records alone (never waiting on Apple: Apple shows its default message when the answer is
/// late), recorded once per request (Apple asking again gets the same answer) and an offer at most once per customer.
public struct RetentionDesk: FulfillmentPart {
    let service: FulfillmentService

    public func retentionMessage(_ p: FulfillmentRetentionMessage.Params) async throws(RPCError) -> FulfillmentRetentionMessage.Result {
        let started = ContinuousClock.now
        try TokenGate.internal.check(p.internalToken, configured: configuration.internalToken)
        let verified = try await dependencies.verifyRealtimeRequest(p.signedPayload)
        guard verified.status == 0, let request = verified.request else {
            throw RPCError.invalidReceipt(
                status: verified.status, reason: verified.reason ?? "invalidRealtimeRequest",
                detail: "the retention request failed verification (status \(verified.status))")
        }
        let now = clock.nowMs
        let customerKey = Self.customerKey(request)
        let context = try await storeCall {
            try await self.store.retentionContext(
                requestIdentifier: request.requestIdentifier, customerKey: customerKey, environment: request.environment,
                originalTransactionId: request.originalTransactionId, nowMs: now)
        }
        if let earlier = context.earlier { return try Self.result(request.requestIdentifier, earlier) }
        guard let token = configuration.internalToken else { throw RPCError.internalError("no internal token") }
        let subscriber = context.subscriber
        // A Sandbox request names no app Apple can vouch for (Apple's library checks appAppleId in Production only): another
        // developer's Sandbox app may sell the same product id. Only a Sandbox subscription verified here is answered.
        if request.environment == "Sandbox", subscriber == nil {
            return RetentionDesk.unrecorded(request, reason: "a Sandbox subscription this server never verified: nothing is chosen")
        }
        let rules: CatalogGetRetention.Result
        do {
            rules = try await dependencies.retention(productId: request.productId, internalToken: token)
        } catch  where error.knownCode == .notFound {
            return RetentionDesk.unrecorded(request, reason: "\(request.productId) is not a subscription of the catalog")
        }
        var given = context.offersGiven
        var history: [SubscriptionHistoryRecord] = []
        if let holder = subscriber?.holder {
            history = try await storeCall { try await self.store.subscriptionHistory(accountId: holder.accountId, scope: holder.scope, nowMs: now) }
        }
        // Offers are for this subscription's customer: its own periods decide `subscribedAtMost`.
        let customer: OfferCustomer =
            subscriber == nil
            ? .unknown("the subscription was never redeemed or notified here")
            : .known(
                transactionId: request.originalTransactionId, history: history.filter { $0.originalTransactionId == request.originalTransactionId })
        // Another request of the same customer may take an offer between the decision and its record: decided again then.
        for _ in 0..<3 {
            let decision = RetentionDecision.choose(
                rules.retention ?? RetentionRules(choices: []), userLocale: request.userLocale, facts: subscriber?.facts ?? .unknown
            ) { choice in offerRefusal(choice, offers: rules.offers ?? [], given: given, customer: customer, nowMs: now) }
            let answer = try await record(
                request, decision.choice, subscriber: subscriber?.holder, reason: decision.reason, rules: rules,
                deadline: p.budgetMs.map { started + .milliseconds($0) })
            if let answer { return answer }
            if let earlier = try await storeCall({ try await self.store.retentionAnswer(requestIdentifier: request.requestIdentifier) }) {
                return try Self.result(request.requestIdentifier, earlier)
            }
            given = try await storeCall {
                try await self.store.retentionOffersGiven(
                    customerKey: customerKey, environment: request.environment, originalTransactionId: request.originalTransactionId)
            }
        }
        throw RPCError.conflict("the customer's offers changed while answering; Apple shows the default message", reason: "busy")
    }

    /// An answer that chooses nothing (Apple shows its default), not recorded: only Apple-signed requests about this app's
    /// known subscriptions and catalog products leave rows behind.
    static func unrecorded(_ request: RealtimeRequest, reason: String) -> FulfillmentRetentionMessage.Result {
        .init(requestIdentifier: request.requestIdentifier, response: RealtimeResponse(), reason: reason)
    }

    /// Why an offer rule cannot be answered now, or nil.
    func offerRefusal(_ choice: RetentionChoice, offers: [SubscriptionOffer], given: Set<String>, customer: OfferCustomer, nowMs: Int64)
        -> String?
    {
        guard configuration.offerKey != nil else { return "offers are not configured on this server (--offer-key)" }
        guard let id = choice.offerId, let offer = offers.first(where: { $0.offerId == id }) else { return "the product has no such offer" }
        if given.contains(id) { return "offered to this customer before" }
        // A customer about to cancel is subscribed: whatever the records say, a win-back or a first-time offer is not theirs.
        if offer.eligibility.kind == .lapsed || offer.eligibility.kind == .neverSubscribed {
            return "a \(offer.eligibility.kind.rawValue) offer is not for a subscriber"
        }
        return OfferRules.refusal(offer, customer: customer, nowMs: nowMs)
    }

    /// Builds the answer for `choice` (the default message when nil and the rules have one) and records it; nil when the
    /// record was refused (the request answered meanwhile, or the offer given to this customer meanwhile).
    private func record(
        _ request: RealtimeRequest, _ choice: RetentionChoice?, subscriber: Holder?, reason: String?, rules: CatalogGetRetention.Result,
        deadline: ContinuousClock.Instant?
    ) async throws(RPCError) -> FulfillmentRetentionMessage.Result? {
        var response = RealtimeResponse()
        var choiceId = choice?.id, kind = "none", offerId: String?
        switch choice?.kind {
        case .message?:
            response.message = .init(messageIdentifier: choice!.messageIdentifier)
            kind = "message"
        case .alternateProduct?:
            response.alternateProduct = .init(
                messageIdentifier: choice!.messageIdentifier, productId: choice!.alternateProductId ?? "", billingPlanType: choice!.billingPlanType)
            kind = "alternateProduct"
        case .promotionalOffer?:
            response.promotionalOffer = try sign(choice!, request: request)
            kind = "promotionalOffer"
            offerId = choice!.offerId
        case nil:
            if let fallback = rules.retention?.defaultMessageIdentifier {
                response.message = .init(messageIdentifier: fallback)
                choiceId = "default"
                kind = "message"
            }
        }
        let json: String
        do {
            json = String(decoding: try JSONEncoder.sorted.encode(response), as: UTF8.self)
        } catch {
            throw RPCError.internalError("encoding the retention answer failed")
        }
        let entry = RetentionAnswerRecord(
            requestIdentifier: request.requestIdentifier, customerKey: Self.customerKey(request), environment: request.environment,
            originalTransactionId: request.originalTransactionId, accountId: subscriber?.accountId, productId: request.productId,
            choiceId: choiceId, kind: kind, offerId: offerId, response: json, reason: choice == nil ? reason : nil, answeredAtMs: clock.nowMs)
        // Past the caller's deadline Apple has shown its default: recording now would spend an offer nobody saw.
        if let deadline, ContinuousClock.now > deadline {
            throw RPCError(code: .requestTimeout, message: "the answer was not ready in time; Apple shows the default message", reason: "tooLate")
        }
        guard try await storeCall({ try await self.store.recordRetentionAnswer(entry) }) else { return nil }
        logger.info(
            "retention request answered",
            metadata: [
                "requestIdentifier": "\(request.requestIdentifier)", "productId": "\(request.productId)", "choice": "\(choiceId ?? "none")",
                "environment": "\(request.environment)",
            ])
        return .init(requestIdentifier: request.requestIdentifier, response: response, choiceId: choiceId, reason: entry.reason)
    }

    /// The offer signed as the rule asks (v2 JWS by default, naming the subscription as Apple's form for retention does).
    private func sign(_ choice: RetentionChoice, request: RealtimeRequest) throws(RPCError) -> RealtimeResponse.PromotionalOffer {
        guard let key = configuration.offerKey, let offerId = choice.offerId else { throw RPCError.internalError("no offer key") }
        let nonce = UUID().uuidString.lowercased(), now = clock.nowMs
        do {
            if choice.signatureVersion == "v1" {
                let signature = try key.signatureV1(productId: request.productId, offerId: offerId, appAccountToken: "", nonce: nonce, nowMs: now)
                return .init(
                    messageIdentifier: choice.messageIdentifier,
                    promotionalOfferSignatureV1: .init(
                        encodedSignature: signature, productId: request.productId, nonce: nonce, timestamp: now, keyId: key.keyId,
                        offerIdentifier: offerId))
            }
            return .init(
                messageIdentifier: choice.messageIdentifier,
                promotionalOfferSignatureV2: try key.signatureV2(
                    productId: request.productId, offerId: offerId, transactionId: request.originalTransactionId, nonce: nonce, nowMs: now))
        } catch {
            logger.error("signing a retention offer failed", metadata: ["error": "\(type(of: error))"])
            throw RPCError.internalError("signing the offer failed")
        }
    }

    /// Offers go once per customer: per subscription at Apple (one per subscription group, kept across plan changes, lapses
    /// and the accounts it moves between), in its environment.
    static func customerKey(_ request: RealtimeRequest) -> String {
        "\(request.environment):original:\(request.originalTransactionId)"
    }

    static func result(_ requestIdentifier: String, _ stored: StoredRetentionAnswer) throws(RPCError) -> FulfillmentRetentionMessage.Result {
        guard let response = try? JSONDecoder().decode(RealtimeResponse.self, from: Data(stored.response.utf8)) else {
            throw RPCError.internalError("a stored retention answer is unreadable")
        }
        return .init(requestIdentifier: requestIdentifier, response: response, choiceId: stored.choiceId, reason: stored.reason)
    }
}

extension JSONEncoder {
    fileprivate static var sorted: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }
}
